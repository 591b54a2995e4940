"""A named cluster: `gpk worker` processes join the starting process, train, and the row comes
back to it. The hosts here are this machine's loopback, named in a cluster file."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.cluster.config import free_loopback_ports
from tests.builders import largest_difference, saved_weights, small_experiment, small_mlp

pytestmark = pytest.mark.slow
KEY = "test-secret"


@pytest.fixture
def cluster_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CLUSTER_KEY", KEY)
    tf_a, tf_b, coordinator = free_loopback_ports(3)
    path = tmp_path / "cluster.json"
    path.write_text(
        json.dumps(
            {
                "worker": [f"127.0.0.1:{tf_a}", f"127.0.0.1:{tf_b}"],
                "coordinator": f"127.0.0.1:{coordinator}",
            }
        )
    )
    return path


def _start_worker(cluster_file, index, key=KEY):
    # The test builders travel by reference (they live in a module), so the workers need that
    # module importable, as a real host needs the user's modules.
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "GPK_CLUSTER_KEY": key, "PYTHONPATH": root}
    return subprocess.Popen(
        [sys.executable, "-m", "gpu_parallel_kit.cli", "worker", "--cluster", str(cluster_file),
         "--index", str(index), "--once", "--join-timeout", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def test_gpk_workers_train_a_run_started_here(cluster_file, tmp_path):
    exp = small_experiment(small_mlp, epochs=2, steps_per_epoch=4, timeout=120)
    single = exp.run(strategy="single", devices=1, save_weights=str(tmp_path / "s.npz"))
    workers = [_start_worker(cluster_file, i) for i in (1, 0)]
    try:
        result = exp.run(
            strategy="multiworker",
            cluster=str(cluster_file),
            save_weights=str(tmp_path / "m.npz"),
        )
        outputs = [w.communicate(timeout=60)[0] for w in workers]
    finally:
        for w in workers:
            w.kill()
    assert result.ok, (result.reason, outputs)
    assert (result.workers, result.devices) == (2, 2)
    assert all(w.returncode == 0 for w in workers), outputs
    assert "joined" in outputs[0]
    detail = result.extra["workers_detail"]
    assert detail[0]["weights_digest"] == detail[1]["weights_digest"]
    diff = largest_difference(saved_weights(tmp_path / "m.npz"), saved_weights(tmp_path / "s.npz"))
    assert diff <= 1e-5
    assert single.ok
    # The row is in the starting process's log, like any other run.
    assert result.run_id in set(gpk.history()["run_id"])


def test_missing_workers_give_a_timeout_row_that_says_how_to_start_them(cluster_file):
    exp = small_experiment(small_mlp, timeout=3)
    start = time.monotonic()
    result = exp.run(strategy="multiworker", cluster=str(cluster_file))
    assert time.monotonic() - start < 15
    assert result.status == "timeout"
    assert "never joined" in result.reason
    assert f"gpk worker --cluster {cluster_file} --index 0" in result.reason


def test_a_worker_with_the_wrong_key_cannot_join(cluster_file):
    exp = small_experiment(small_mlp, timeout=8)
    intruder = _start_worker(cluster_file, 1, key="wrong")
    try:
        result = exp.run(strategy="multiworker", cluster=str(cluster_file))
        said, _ = intruder.communicate(timeout=30)
    finally:
        intruder.kill()
    assert result.status == "timeout"
    assert "workers [0, 1] never joined" in result.reason
    assert intruder.returncode == 2
    assert "refused this worker's key; set the same GPK_CLUSTER_KEY" in said


def test_a_killed_gpk_worker_fails_the_run_and_stops_the_others(cluster_file):
    exp = small_experiment(small_mlp, steps_per_epoch=5000, timeout=90)
    workers = [_start_worker(cluster_file, i) for i in (0, 1)]
    started = []

    def on_event(event):
        if event.get("event") == "progress" and event["step"] >= 3 and not started:
            # Everything each `gpk worker` started: its fork server and the training process.
            started.extend(psutil.Process(w.pid).children(recursive=True) for w in workers)
            workers[1].kill()

    try:
        result = gpk.runner.run_isolated(
            exp.plan("multiworker", 1, cluster=str(cluster_file)), on_event
        )
        survivor_exit = workers[0].wait(timeout=30)
    finally:
        for w in workers:
            w.kill()
            w.communicate()
    assert result.status == "crashed", result.reason
    assert result.reason.startswith("worker 1 of 2: the worker's connection closed"), result.reason
    assert survivor_exit == 0  # told to stop, it ended its run and, with --once, itself
    assert all(len(group) >= 2 for group in started)  # a fork server and a training process
    time.sleep(1.0)
    leftovers = [p for group in started for p in group if _alive(p)]
    assert leftovers == []


def _alive(process):
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_busy_coordinator_port_is_a_failed_row_that_says_so(cluster_file):
    port = json.loads(cluster_file.read_text())["coordinator"].rsplit(":", 1)[1]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", int(port)))
        taken.listen()
        result = small_experiment(small_mlp, timeout=5).run(
            strategy="multiworker", cluster=str(cluster_file)
        )
    assert result.status == "failed"
    assert f"could not listen on the coordinator address 127.0.0.1:{port}" in result.reason
