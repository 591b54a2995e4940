"""JAX runs on a named cluster: two `gpk worker` processes on this machine (the cluster file names
loopback addresses) join the starting process, form one `jax.distributed` mesh and train; the row
comes back here. About 25 s on two shared cores: each worker starts its JAX server."""

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


def _start_worker(cluster_file, index, key=KEY):
    # The builders travel by reference, so the workers need the tests importable, as a real host
    # needs the user's modules.
    env = {**os.environ, "GPK_CLUSTER_KEY": key, "PYTHONPATH": ROOT}
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_parallel_kit.cli", "worker", "--cluster", str(cluster_file),
         "--index", str(index), "--once", "--join-timeout", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def test_gpk_workers_train_a_jax_run_after_turning_away_a_wrong_key(cluster_file):
    exp = small_experiment(small_mlp, backend="jax", steps_per_epoch=4, timeout=120)
    intruder = _start_worker(cluster_file, 1, key="wrong")
    workers = []

    def start_workers_once_refused():
        intruder.wait(timeout=60)  # refused by the coordinator exp.run is listening with
        workers.extend(_start_worker(cluster_file, i) for i in (1, 0))

    starter = threading.Thread(target=start_workers_once_refused)
    starter.start()
    try:
        result = exp.run(strategy="multiworker", devices=2, cluster=str(cluster_file))
        starter.join()
        outputs = [w.communicate(timeout=60)[0] for w in workers]
        refused = intruder.communicate(timeout=10)[0]
    finally:
        starter.join()
        for w in (*workers, intruder):
            w.kill()
    assert intruder.returncode == 2
    assert "refused this worker's key; set the same GPK_CLUSTER_KEY" in refused
    assert result.ok, (result.reason, outputs)
    assert (result.backend, result.workers, result.devices) == ("jax", 2, 4)
    detail = result.extra["workers_detail"]
    assert [d["status"] for d in detail] == ["ok", "ok"]
    assert detail[0]["weights_digest"] == detail[1]["weights_digest"]
    assert result.extra["joined_by"] == "the cluster file"
    assert all(w.returncode == 0 for w in workers), outputs
    assert "[Gloo]" not in "".join(outputs), outputs
    assert result.run_id in set(gpk.history()["run_id"])
