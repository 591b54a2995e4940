"""Multi-worker planning, cluster files, result merging and the network checks, without workers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.cli.commands import main
from gpu_parallel_kit.cluster import reports as cluster_results
from gpu_parallel_kit.cluster.config import ClusterSpec, load_cluster, split_address, tf_config
from gpu_parallel_kit.cluster.network import _decode_address, reachable_from_network
from gpu_parallel_kit.cluster.reports import WorkerReports, merge_worker_results
from gpu_parallel_kit.cluster.transfer import pack_job, unpack_job
from gpu_parallel_kit.cluster.worker_devices import local_worker_plan, plan_on_this_host
from gpu_parallel_kit.runs.description import device_choice
from gpu_parallel_kit.runs.description.device_choice import PhysicalDevice
from gpu_parallel_kit.runs.results.run_result import RunResult
from gpu_parallel_kit.runs.scheduling.comparison_grid import plan_grid
from tests.builders import small_mlp_experiment

CPU = PhysicalDevice("/physical_device:CPU:0", "cpu", 0, "2 cores")


pytestmark = pytest.mark.usefixtures("no_workers")


def test_local_multiworker_plan_counts_every_workers_devices():
    spec = small_mlp_experiment().plan("multiworker", 1, workers=4)
    assert (spec.workers, spec.replicas, spec.global_batch, spec.mode) == (4, 4, 32, "explicit")
    identity = spec.result_identity()
    assert identity["devices"] == 4 and identity["workers"] == 4
    assert small_mlp_experiment(scaling="weak").plan("multiworker", 1, workers=2).global_batch == 64
    assert small_mlp_experiment().plan("multiworker", 1).workers == 2  # the default


def test_two_gpus_per_worker_are_planned_on_a_gpu_machine(fake_machine):
    gpu = [PhysicalDevice(f"/physical_device:GPU:{i}", "gpu", i, "A100", 40 << 30) for i in (0, 1)]
    fake_machine.physical = (CPU, *gpu)
    spec = small_mlp_experiment().plan("multiworker", 2, workers=2)
    assert (spec.replicas, spec.devices.kind, spec.devices.virtual) == (4, "gpu", False)
    assert spec.all_reduce == "auto"


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (dict(devices=2, workers=2), "devices=2 per worker needs GPUs.*use workers=4, devices=1"),
        (dict(mode="fit"), "mode='fit' is not available with strategy='multiworker'"),
        (dict(all_reduce="reduce_to_one"), "all_reduce='reduce_to_one' is not available"),
        (dict(workers=0), "workers=0 is too few; use workers=1 or more"),
    ],
)
def test_bad_multiworker_plans_are_one_sentence(plan, message):
    plan = {"devices": 1, **plan}
    with pytest.raises(gpk.GpkError, match=message) as error:
        small_mlp_experiment().run("multiworker", **plan)
    assert "\n" not in str(error.value)


def test_workers_belong_to_multiworker_only():
    spec = small_mlp_experiment().plan("data", 2)
    with pytest.raises(gpk.GpkError, match="workers=3 spreads strategy='data' over processes on"):
        dataclasses.replace(spec, options={"workers": 3})
    with pytest.raises(gpk.GpkError, match="all_reduce='ring' is for strategy='multiworker'"):
        small_mlp_experiment().run("data", 2, all_reduce="ring")


def test_compare_skips_cpu_multiworker_runs_that_could_only_fail():
    exp = small_mlp_experiment()
    grid = ["single", "data", "multiworker"]
    specs = plan_grid(exp.plan, grid, [1, 2], {"workers": 2, "backend": exp.backend})
    assert [(s.strategy, s.devices.count, s.workers) for s in specs] == [
        ("single", 1, 1),
        ("data", 1, 1),
        ("data", 2, 1),
        ("multiworker", 1, 2),
    ]


def _cluster_file(tmp_path, **content):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(content))
    return path


def test_cluster_file_forms(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CLUSTER_KEY", "s3cret")
    plain = _cluster_file(tmp_path, worker=["a:1", "b:2"], coordinator="a:3")
    cluster = load_cluster(plain)
    assert cluster.workers == ("a:1", "b:2") and cluster.coordinator_address == ("a", 3)
    assert cluster.key == "s3cret"
    assert repr(cluster) == "<ClusterSpec 2 workers, chief a:1, coordinator a:3>"
    tf_style = {"cluster": {"worker": ["a:1"]}, "coordinator": "a:3"}
    assert load_cluster(tf_style).workers == ("a:1",)
    spec = small_mlp_experiment().plan("multiworker", 1, cluster=str(plain))
    assert spec.workers == 2 and spec.cluster == cluster
    with pytest.raises(gpk.GpkError, match="workers=3 but the cluster"):
        small_mlp_experiment().plan("multiworker", 1, cluster=str(plain), workers=3)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (dict(coordinator="a:3"), "no list of worker addresses"),
        (dict(worker=["a:1"]), "names no coordinator"),
        (dict(worker=["a"], coordinator="a:3"), "address 'a' is not host:port"),
        (dict(worker=["a:1", "a:1"], coordinator="a:3"), "lists a worker address twice"),
    ],
)
def test_bad_cluster_files(tmp_path, monkeypatch, content, message):
    monkeypatch.setenv("GPK_CLUSTER_KEY", "k")
    with pytest.raises(gpk.GpkError, match=message):
        load_cluster(_cluster_file(tmp_path, **content))


def test_a_cluster_needs_a_key(tmp_path, monkeypatch):
    monkeypatch.delenv("GPK_CLUSTER_KEY", raising=False)
    with pytest.raises(gpk.GpkError, match="set GPK_CLUSTER_KEY"):
        load_cluster(_cluster_file(tmp_path, worker=["a:1"], coordinator="a:3"))
    with pytest.raises(gpk.GpkError, match="is not a file"):
        load_cluster(str(tmp_path / "missing.json"))


def test_tf_config_names_the_task():
    config = json.loads(tf_config(["a:1", "b:2"], 1))
    assert config == {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    with pytest.raises(gpk.GpkError, match="--index 2 is outside the cluster's 2 workers"):
        tf_config(["a:1", "b:2"], 2)
    assert split_address("[::1]:80") == ("::1", 80)


def _result(status="ok", **fields):
    base = dict(run_id="r", experiment_id="e", strategy="multiworker", devices=2, virtual=False)
    return RunResult(**{**base, "status": status, **fields})


def test_merged_row_is_the_chiefs_with_every_workers_memory():
    chief = _result(step_time_s=0.5, peak_memory_bytes={"/cpu:0": 10}, device_names=("/cpu:0",))
    other = _result(step_time_s=0.6, peak_memory_bytes={"/cpu:0": 30}, device_names=("/cpu:0",))
    row = merge_worker_results({0: chief, 1: other}, 2)
    assert row.step_time_s == 0.5
    assert row.peak_memory_bytes == {"worker0 /cpu:0": 10, "worker1 /cpu:0": 30}
    assert row.max_peak_memory_bytes == 30
    assert [d["worker"] for d in row.extra["workers_detail"]] == [0, 1]


def test_a_dead_worker_explains_the_run_better_than_its_broken_peers():
    broken_peer = _result("failed", reason="collective failed: peer unavailable")
    killed = _result("crashed", reason="the worker process was killed by SIGKILL")
    stopped = _result("cancelled", reason="stopped after another worker failed")
    row = merge_worker_results({0: broken_peer, 1: killed, 2: stopped}, 3)
    assert row.status == "crashed"
    assert row.reason == "worker 1 of 3: the worker process was killed by SIGKILL"
    assert row.extra["failed_worker"] == 1


def test_listening_sockets_are_judged_by_address_and_interfaces():
    assert _decode_address("0100007F", 4) == "127.0.0.1"
    assert _decode_address("00000000000000000000000001000000", 16) == "::1"
    assert not reachable_from_network([("127.0.0.1", 5)], ["lo", "eth0"])
    assert not reachable_from_network([("0.0.0.0", 5), ("::", 6)], ["lo"])
    assert reachable_from_network([("0.0.0.0", 5)], ["lo", "eth0"])
    assert reachable_from_network([("10.0.0.2", 5)], ["lo", "eth0"])


def test_a_job_carries_its_data_files_to_another_host(tmp_path):
    experiment = small_mlp_experiment()  # owns the array files while it lives
    spec = experiment.plan("multiworker", 1, workers=2)
    job = pack_job(spec)
    assert set(job["files"]) == set(spec.data.paths)
    (tmp_path / "there").mkdir()
    there = unpack_job(job, tmp_path / "there")
    assert all(p.startswith(str(tmp_path / "there")) for p in there.data.paths)
    assert [Path(p).read_bytes() for p in there.data.paths] == list(job["files"].values())
    assert there.run_id == spec.run_id and there.workers == 2


def test_gpk_worker_needs_its_cluster_and_index(tmp_path, monkeypatch, capsys):
    assert main(["worker", "--index", "0"]) == 2
    assert "--cluster" in capsys.readouterr().err
    monkeypatch.setenv("GPK_CLUSTER_KEY", "k")
    path = _cluster_file(tmp_path, worker=["127.0.0.1:1"], coordinator="127.0.0.1:2")
    assert main(["worker", "--cluster", str(path), "--index", "3"]) == 2
    assert "--index 3 is outside the cluster's 1 workers" in capsys.readouterr().err


def test_cluster_spec_validates_itself():
    with pytest.raises(gpk.GpkError, match="names no worker"):
        ClusterSpec((), "a:1", "k")


def _gpu_plan(count, gpus=4, **fields):
    physical = (CPU, *(PhysicalDevice(f"/physical_device:GPU:{i}", "gpu", i, "A100", 40 << 30)
                       for i in range(gpus)))  # fmt: skip
    return device_choice.plan_devices(count, physical=physical, **fields)


def test_local_workers_get_gpus_of_their_own_when_there_are_enough():
    plan = _gpu_plan(2, gpus=4)
    assert [local_worker_plan(plan, i, 2, gpus=4).physical_indices for i in (0, 1)] == [
        (0, 1),
        (2, 3),
    ]
    # Too few for both: they share GPUs 0 and 1.
    assert local_worker_plan(_gpu_plan(2, gpus=2), 1, 2, gpus=2).physical_indices == (0, 1)


def test_workers_sharing_virtual_gpus_divide_their_memory():
    plan = _gpu_plan(2, gpus=1)
    assert plan.virtual and plan.per_physical == 2
    shared = local_worker_plan(plan, 1, 2, gpus=1)
    assert shared.memory_per_logical_bytes * 2 * 2 <= int(40 << 30)
    assert shared.memory_per_logical_bytes == plan.memory_per_logical_bytes // 2


def test_cpu_plans_and_single_workers_are_left_alone():
    cpu_plan = device_choice.plan_devices(1, physical=(CPU,))
    assert local_worker_plan(cpu_plan, 1, 2, gpus=0) == cpu_plan
    plan = _gpu_plan(2)
    assert local_worker_plan(plan, 0, 1, gpus=4) == plan


def test_a_cluster_host_plans_its_own_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CLUSTER_KEY", "k")
    path = _cluster_file(tmp_path, worker=["a:1", "b:2"], coordinator="a:3")
    # Two devices per worker is refused on this CPU machine for local workers only: the hosts of
    # a named cluster may have GPUs, and plan them themselves.
    spec = small_mlp_experiment().plan("multiworker", 2, cluster=str(path))
    assert spec.replicas == 4
    on_host = plan_on_this_host(spec.devices, (CPU, *_gpu_plan_physical(2)))
    assert (on_host.kind, on_host.count, on_host.virtual) == ("gpu", 2, False)
    with pytest.raises(gpk.GpkError, match="per worker needs GPUs"):
        dataclasses.replace(spec, options={**spec.options, "cluster": None})


def _gpu_plan_physical(gpus):
    return tuple(PhysicalDevice(f"/physical_device:GPU:{i}", "gpu", i, "A100") for i in range(gpus))


def test_worker_reports_relay_the_chief_and_stop_the_rest_after_a_failure(monkeypatch):
    relayed = []
    identity = (
        small_mlp_experiment(batch_size=33).plan("multiworker", 1, workers=3).result_identity()
    )
    reports = WorkerReports(3, identity, relayed.append)
    reports.handle(1, {"event": "phase", "phase": "training"})
    reports.handle(0, {"event": "progress", "step": 2})
    assert relayed == [{"event": "progress", "step": 2}]  # only the chief speaks for the run
    reports.ended(1, "crashed", "the worker process was killed by SIGKILL while training")
    assert reports.pending == [0, 2]
    assert reports.stragglers() == []  # peers get a grace period to report their own cause
    monkeypatch.setattr(cluster_results, "FAILURE_GRACE_S", 0.0)
    assert reports.stragglers() == [0, 2]
    assert reports.results[2].reason == "stopped after another worker failed (was starting)"
    row = reports.row()
    assert (row.status, row.extra["failed_worker"]) == ("crashed", 1)
