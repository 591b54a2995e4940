"""Ctrl-C during a comparison: the running worker is killed, finished rows are kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import gpu_parallel_kit as gpk

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import gpu_parallel_kit as gpk
    from tests import builders
    exp = gpk.Experiment(model=builders.slow_when_distributed, data=builders.small_data(),
                         batch_size=32, epochs=1, steps_per_epoch=3, progress=False)
    cmp = exp.compare(["single", "data"], [1, 2, 4])
    print("RETURNED", *cmp.table["status"], flush=True)
    input()  # stay alive so the test can look at the processes left behind
    """
)


def _default_sigint() -> None:
    """In the child, before it execs: SIGINT back to its default. A background job of a
    non-interactive shell starts pytest with SIGINT ignored, and an ignored signal stays ignored
    across exec, so the script would never see the signal this test sends and the test would hang
    to its timeout. From the default, Python installs its KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(predicate, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_ctrl_c_cancels_within_two_seconds_and_keeps_finished_rows(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root}
    script = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        assert _wait_for(lambda: len(gpk.history()) >= 2, timeout=120), (
            "one-device runs never logged"
        )
        time.sleep(1.5)  # the data x2 run is now inside its hanging builder
        workers = [
            p for p in psutil.Process(script.pid).children(recursive=True) if p.ppid() != script.pid
        ]
        assert workers, "no worker process was running"
        script.send_signal(signal.SIGINT)
        pressed = time.perf_counter()
        line = script.stdout.readline()
        assert time.perf_counter() - pressed < 2
        assert line.split() == ["RETURNED", "ok", "ok", "cancelled", "cancelled"]
        assert _wait_for(
            lambda: not any(w.is_running() and w.status() != "zombie" for w in workers), timeout=2
        )
        assert list(gpk.history()["status"]) == ["ok", "ok", "cancelled", "cancelled"]
    finally:
        script.kill()
        script.wait()
