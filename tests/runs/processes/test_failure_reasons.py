"""Failure reasons on literal exceptions and exit codes."""

from __future__ import annotations

from gpu_parallel_kit.runs.processes.failure_reasons import classify_exception, classify_exit


def test_failure_reasons():
    assert classify_exception(MemoryError("no room"), "training") == (
        "oom",
        "ran out of memory while training: MemoryError: no room",
    )
    status, reason = classify_exception(
        ValueError("in user code:\n\n  File x\n  bad shape"), "training"
    )
    assert (status, reason) == ("failed", "failed while training: ValueError: bad shape")
    assert classify_exit(-9, "training")[1].startswith("the worker process was killed by SIGKILL")
    assert classify_exit(3, "starting") == (
        "crashed",
        "the worker process exited with code 3 while starting",
    )
