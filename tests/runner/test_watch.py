"""The runner follows its child by waiting on the pipe and the child's sentinel, not by polling.

Plain forked children stand in for workers (no TensorFlow), so these run in a fraction of a second:
events and a result arrive, a crash is a row, a child that dies while something it started still
holds the pipe open is a row at once, and timeout and cancel still stop the child.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from gpu_parallel_kit.runner import _Watch
from gpu_parallel_kit.runs.processes.child_process import stop_child
from gpu_parallel_kit.runs.results.run_result import RunResult

IDENTITY = dict(run_id="r", experiment_id="e", strategy="single", devices=1, virtual=False)
_fork = multiprocessing.get_context("fork")


def _follow(child, timeout_s=None, cancel=None):
    """(the row, the events) of following `child(sender)` in a forked process."""
    receiver, sender = _fork.Pipe(duplex=False)
    process = _fork.Process(target=child, args=(sender,), daemon=True)
    process.start()
    sender.close()
    events = []
    spec = SimpleNamespace(timeout_s=timeout_s, result_identity=lambda: dict(IDENTITY))
    try:
        return _Watch(spec, events.append, cancel).follow(process, receiver), events
    finally:
        receiver.close()
        stop_child(process)


def _reports(sender):
    sender.send({"event": "phase", "phase": "training"})
    sender.send({"event": "result", "result": RunResult(**IDENTITY, status="ok").to_dict()})
    os._exit(0)


def _exits(sender):
    sender.send({"event": "phase", "phase": "loading"})
    os._exit(3)


def _dies_leaving_the_pipe_open(sender):
    grandchild = os.fork()
    if grandchild == 0:  # holds the pipe's sending end, and only that, past the test's wait
        keep = sender.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 4096)
        time.sleep(30)
        os._exit(0)
    sender.send({"event": "grandchild", "pid": grandchild})
    os._exit(1)


def _hangs(sender):
    time.sleep(30)


def test_events_reach_the_caller_and_the_result_ends_the_run():
    row, events = _follow(_reports)
    assert row.status == "ok" and "process_s" in row.extra
    assert events == [{"event": "phase", "phase": "training"}]


def test_a_child_that_exits_without_a_result_is_a_crashed_row_naming_its_phase():
    row, _ = _follow(_exits)
    assert (row.status, row.reason) == (
        "crashed",
        "the worker process exited with code 3 while loading",
    )


def test_the_sentinel_ends_the_run_while_a_grandchild_holds_the_pipe():
    started = time.perf_counter()
    row, events = _follow(_dies_leaving_the_pipe_open, timeout_s=20)
    try:
        # Waiting on the pipe alone would wait for the grandchild, then the 20 s timeout.
        assert time.perf_counter() - started < 5
        assert (row.status, row.reason) == (
            "crashed",
            "the worker process exited with code 1 while starting",
        )
    finally:
        os.kill(events[0]["pid"], signal.SIGKILL)


def test_a_hanging_child_times_out():
    row, _ = _follow(_hangs, timeout_s=0.3)
    assert row.status == "timeout" and "0.3 s timeout (still starting)" in row.reason


@pytest.mark.parametrize("after_s", [0.0, 0.3])
def test_cancel_stops_the_child_within_two_seconds(after_s):
    cancel = threading.Event()
    threading.Timer(after_s, cancel.set).start()
    started = time.perf_counter()
    row, _ = _follow(_hangs, cancel=cancel)
    assert (row.status, row.reason) == ("cancelled", "cancelled while starting")
    assert time.perf_counter() - started < 2


def _waits_at_the_gate_then_reports(sender):
    time.sleep(0.35)  # at the gate, while the runs preparing beside it finish
    sender.send({"event": "turn"})
    time.sleep(0.35)  # its own training: 0.7 s in all, beyond the 0.5 s timeout from the start
    sender.send({"event": "result", "result": RunResult(**IDENTITY, status="ok").to_dict()})
    os._exit(0)


def test_a_run_prepared_beside_others_is_timed_out_from_its_turn():
    row, events = _follow(_waits_at_the_gate_then_reports, timeout_s=0.5)
    assert row.status == "ok" and events == []  # its turn is the runner's, not the display's
    row, _ = _follow(_hangs, timeout_s=0.3)  # a run that never gets its turn still times out
    assert row.status == "timeout"
