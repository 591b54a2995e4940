"""Multi-worker data parallel on local worker processes: same weights as one device, faults
stopped cleanly, ports reachable on loopback only."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.cluster.network import listening_addresses
from tests.builders import (
    largest_difference,
    saved_weights,
    slow_when_distributed,
    small_experiment,
    small_mlp,
)

pytestmark = pytest.mark.slow


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_two_workers_train_the_weights_of_one_device(experiment, tmp_path):
    import keras  # in the test: the fast subset collects this module without TensorFlow

    single = experiment.run(strategy="single", devices=1, save_weights=str(tmp_path / "s.npz"))
    assert single.ok, single.reason
    result = experiment.run(
        strategy="multiworker", workers=2, devices=1, save_weights=str(tmp_path / "m.npz")
    )
    assert result.ok, result.reason
    assert (result.workers, result.devices, result.global_batch) == (2, 2, 32)
    assert result.mode == "explicit"
    assert result.all_reduce == "auto (ring collective)"
    reference, weights = saved_weights(tmp_path / "s.npz"), saved_weights(tmp_path / "m.npz")
    keras.utils.set_random_seed(0)
    initial = small_mlp().get_weights()
    diff = largest_difference(weights, reference)
    assert diff <= 1e-5, f"2 workers drifted from one device by {diff}"
    moved = largest_difference(weights, initial)
    assert moved > 1e-3
    detail = result.extra["workers_detail"]
    assert [d["status"] for d in detail] == ["ok", "ok"]
    assert detail[0]["weights_digest"] == detail[1]["weights_digest"]
    # One memory figure per worker, and the loss history of the chief.
    assert len(result.peak_memory_bytes) == 2 and all(result.peak_memory_bytes.values())
    assert len(result.history["loss"]) == 2
    # Communication measured like a data-parallel run's: the ring moves 2(N-1)/N of the gradients.
    measured = result.comm_time_s is not None or result.extra["comm_time_raw_s"] is not None
    assert measured and result.extra["standalone_all_reduce_s"] > 0
    assert result.extra["traffic_bytes_per_device"] == result.comm_bytes
    assert result.devices_per_worker == 1


def test_worker_ports_are_reachable_on_loopback_only(experiment):
    seen = {}

    def on_event(event):
        if event.get("event") == "workers":
            # Looked at from this process's network: the workers' servers are not here at all.
            ports = {int(a.rsplit(":", 1)[1]) for a in seen["cluster"]["workers"]}
            seen["host_listening"] = {port for _, port in listening_addresses()} & ports
        elif event.get("event") == "cluster":
            seen["cluster"] = event

    spec = experiment.plan("multiworker", 1, workers=2)
    result = gpk.runner.run_isolated(spec, on_event)
    assert result.ok, result.reason
    assert all(a.startswith("127.0.0.1:") for a in seen["cluster"]["workers"])
    assert "loopback only" in seen["cluster"]["isolation"]
    assert seen["host_listening"] == set()
    # Looked at from inside the chief: its server listens, and only loopback can reach it.
    assert result.extra["network_interfaces"] == ["lo"]
    assert result.extra["reachable_from_network"] is False
    chief_port = result.extra["workers_addresses"][0].rsplit(":", 1)[1]
    assert any(a.endswith(f":{chief_port}") for a in result.extra["listening"])


def test_a_killed_worker_fails_the_run_and_leaves_no_process(tmp_path):
    exp = small_experiment(small_mlp, steps_per_epoch=5000, timeout=90)
    pids = []

    def on_event(event):
        if event.get("event") == "workers":
            pids.extend(event["pids"])
        elif event.get("event") == "progress" and event["step"] >= 3 and pids:
            os.kill(pids[1], signal.SIGKILL)

    start = time.monotonic()
    result = gpk.runner.run_isolated(exp.plan("multiworker", 1, workers=2), on_event)
    elapsed = time.monotonic() - start
    assert result.status == "crashed", result.reason
    assert result.reason.startswith("worker 1 of 2:"), result.reason
    assert "SIGKILL" in result.reason
    assert result.extra["failed_worker"] == 1
    assert elapsed < 60
    time.sleep(0.5)
    assert not [pid for pid in pids if _alive(pid)]
    children = psutil.Process().children(recursive=True)
    assert not [c for c in children if c.pid in pids]


def test_two_workers_with_two_devices_each(experiment, tmp_path):
    if not any(
        d.kind == "gpu" for d in gpk.runs.description.device_choice.discover_physical_devices()
    ):
        pytest.skip("2 devices per worker needs GPUs: on the CPU each worker trains one replica")
    single = experiment.run(strategy="single", devices=1, save_weights=str(tmp_path / "s.npz"))
    result = experiment.run(
        strategy="multiworker", workers=2, devices=2, save_weights=str(tmp_path / "m.npz")
    )
    assert single.ok and result.ok, result.reason
    assert result.devices == 4
    diff = largest_difference(saved_weights(tmp_path / "m.npz"), saved_weights(tmp_path / "s.npz"))
    assert diff <= 1e-5


def test_a_timed_out_run_takes_every_worker_down():
    exp = small_experiment(slow_when_distributed, steps_per_epoch=2, timeout=8)
    pids = []

    def on_event(event):
        if event.get("event") == "workers":
            pids.extend(event["pids"])

    result = gpk.runner.run_isolated(exp.plan("multiworker", 1, workers=2), on_event)
    assert result.status == "timeout", result.reason
    assert "still building the model" in result.reason
    assert len(pids) == 2
    time.sleep(0.5)
    assert not [pid for pid in pids if _alive(pid)]
