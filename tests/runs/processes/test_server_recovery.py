"""A server killed between runs is started again at the next run, on both backends; a warmed
server serves the first run. Real servers and workers: slow."""

from __future__ import annotations

import multiprocessing.forkserver
import os
import signal

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.runs.processes import server_client
from gpu_parallel_kit.runs.scheduling import servers_ahead

pytestmark = pytest.mark.slow


def _experiment(**kw):
    return gpk.Experiment(
        model="mlp", data="tabular", samples=512, batch_size=128, progress=False, **kw
    )


def test_a_warmed_server_serves_the_first_run_and_a_killed_one_is_started_again(monkeypatch):
    monkeypatch.setenv("GPK_WARM", "1")
    monkeypatch.setattr(servers_ahead, "_warming", {})
    thread = servers_ahead.warm("tensorflow")
    assert thread is not None
    thread.join(120)
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    assert server is not None
    exp = _experiment()
    assert exp.run("single").ok
    os.kill(server, signal.SIGKILL)  # as the OOM killer would: the largest process
    assert exp.run("data", 2).ok
    assert multiprocessing.forkserver._forkserver._forkserver_pid != server


def test_a_killed_jax_server_is_started_again_at_the_next_run():
    exp = _experiment(backend="jax")
    assert exp.run("single").ok
    first = server_client.jax_server()
    first._process.kill()
    first._process.join(5)
    assert exp.run("single").ok
    assert server_client.jax_server() is not first


def test_a_jax_server_warmed_from_a_thread_outlives_the_thread(monkeypatch):
    """Linux's parent-death signal follows the thread that started a process: a server tied to
    it would die with the warming thread, and the first run would start it all over again."""
    server_client.stop_jax_server()
    monkeypatch.setenv("GPK_WARM", "1")
    monkeypatch.setattr(servers_ahead, "_warming", {})
    thread = servers_ahead.warm("jax")
    assert thread is not None
    thread.join(120)
    warmed = server_client.jax_server()
    assert _experiment(backend="jax").run("single").ok
    assert server_client.jax_server() is warmed and warmed.alive
