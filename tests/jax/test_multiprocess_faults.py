"""A JAX run over local processes that loses a worker ends within its bound, with a row naming the
worker and why, and leaves no process behind. About 45 s on two shared cores: a killed worker ends
the run at once, a stopped one once JAX's heartbeat (30 s here) notices it."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

import gpu_parallel_kit as gpk
from tests.builders import small_experiment, small_mlp

pytestmark = pytest.mark.slow

BOUND_S = 120  # the promise: a dead or stuck worker ends the run within it


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _run_and_signal(sig):
    """A long data run over 2 workers; worker 1 gets `sig` at step 3. The row, seconds from the
    signal to the row, and the workers' pids."""
    exp = small_experiment(small_mlp, steps_per_epoch=5000, timeout=300, backend="jax")
    pids, sent = [], []

    def on_event(event):
        if event.get("event") == "workers":
            pids.extend(event["pids"])
        elif event.get("event") == "progress" and event["step"] >= 3 and pids and not sent:
            sent.append(time.monotonic())
            os.kill(pids[1], sig)

    result = gpk.runner.run_isolated(exp.plan("data", 1, workers=2), on_event)
    return result, time.monotonic() - sent[0], pids


@pytest.mark.parametrize(
    ("sig", "status", "why"),
    [
        (signal.SIGKILL, "crashed", "killed by SIGKILL"),
        (signal.SIGSTOP, "timeout", "stopped while training and no longer answered its peers"),
    ],
)
def test_a_lost_worker_ends_the_run_named_and_leaves_no_process(sig, status, why):
    result, after, pids = _run_and_signal(sig)
    assert result.status == status, result.reason
    assert result.reason.startswith("worker 1 of 2:") and why in result.reason, result.reason
    assert result.extra["failed_worker"] == 1
    assert after < BOUND_S
    time.sleep(0.5)
    assert len(pids) == 2 and not [pid for pid in pids if _alive(pid)]
