"""JAX runs on a named cluster: two `gpk worker` processes on this machine (the cluster file names
loopback addresses) join the starting process, form one `jax.distributed` mesh and train; the row
comes back here, for `multiworker` and for `fsdp`. About 30 s on two shared cores: each worker
starts its JAX server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.cluster.config import free_loopback_ports
from tests.builders import small_experiment, small_mlp

pytestmark = pytest.mark.slow
KEY = "test-secret"
ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def cluster_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CLUSTER_KEY", KEY)
    jax_a, jax_b, coordinator = free_loopback_ports(3)
    path = tmp_path / "cluster.json"
    workers = [f"127.0.0.1:{jax_a}", f"127.0.0.1:{jax_b}"]
    path.write_text(json.dumps({"worker": workers, "coordinator": f"127.0.0.1:{coordinator}"}))
    return path


def _start_worker(cluster_file, index, key=KEY, once=False):
    # The builders travel by reference, so the workers need the tests importable, as a real host
    # needs the user's modules.
    env = {**os.environ, "GPK_CLUSTER_KEY": key, "PYTHONPATH": ROOT}
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_parallel_kit.cli", "worker", "--cluster", str(cluster_file),
         "--index", str(index), "--join-timeout", "60", *(["--once"] if once else [])],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def test_gpk_workers_serve_jax_runs_after_turning_away_a_wrong_key(cluster_file):
    exp = small_experiment(small_mlp, backend="jax", steps_per_epoch=4, timeout=120)
    intruder = _start_worker(cluster_file, 1, key="wrong", once=True)
    workers = []

    def start_workers_once_refused():
        intruder.wait(timeout=60)  # refused by the coordinator exp.run is listening with
        workers.extend(_start_worker(cluster_file, i) for i in (1, 0))

    starter = threading.Thread(target=start_workers_once_refused)
    starter.start()
    try:
        data = exp.run(strategy="multiworker", devices=2, cluster=str(cluster_file))
        starter.join()
        fsdp = exp.run(strategy="fsdp", devices=1, cluster=str(cluster_file), min_shard_bytes=0)
        refused = intruder.communicate(timeout=10)[0]
    finally:
        starter.join()
        for w in (*workers, intruder):
            w.kill()
    outputs = [w.communicate(timeout=30)[0] for w in workers]
    assert intruder.returncode == 2
    assert "refused this worker's key; set the same GPK_CLUSTER_KEY" in refused
    for row, devices, mesh in ((data, 4, ""), (fsdp, 2, "2x1")):
        assert row.ok, (row.reason, outputs)
        assert (row.backend, row.workers, row.devices, row.mesh) == ("jax", 2, devices, mesh)
        detail = row.extra["workers_detail"]
        assert [d["status"] for d in detail] == ["ok", "ok"]
        assert detail[0]["weights_digest"] == detail[1]["weights_digest"]
        assert row.extra["joined_by"] == "the cluster file"
    assert "[Gloo]" not in "".join(outputs), outputs
    assert {data.run_id, fsdp.run_id} <= set(gpk.history()["run_id"])
