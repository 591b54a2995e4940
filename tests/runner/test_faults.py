"""A run that fails in any way becomes a row with the right status; the other runs go on."""

from __future__ import annotations

import threading
import time

import pytest

import gpu_parallel_kit as gpk
from tests import builders
from tests.builders import small_experiment

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("builder", "status", "reason_part"),
    [
        (builders.raising_builder, "failed", "the builder broke on purpose"),
        (builders.memory_hungry_builder, "oom", "cannot allocate 64 GiB"),
        (builders.exiting_builder, "crashed", "exited with code 3"),
        (builders.self_killing_builder, "crashed", "killed by SIGKILL"),
    ],
)
def test_failed_run_becomes_a_row(builder, status, reason_part):
    result = small_experiment(builder).run(strategy="data", devices=2)
    assert result.status == status
    assert reason_part in result.reason
    assert "\n" not in result.reason
    logged = gpk.history()
    assert list(logged["status"]) == [status]


def test_hanging_run_times_out():
    started = time.perf_counter()
    result = small_experiment(builders.sleeping_builder, timeout=3).run(strategy="single")
    assert result.status == "timeout"
    assert "3 s timeout" in result.reason and "building the model" in result.reason
    assert time.perf_counter() - started < 15


def test_comparison_goes_on_after_a_failure(monkeypatch):
    exp = small_experiment(builders.small_mlp)
    broken = small_experiment(builders.raising_builder)
    rows = [broken.run(strategy="single"), *exp.compare(["single", "data"], [2]).results]
    # "single" runs once, on one device, even when only 2 devices are asked for.
    assert [(r.strategy, r.devices, r.status) for r in rows] == [
        ("single", 1, "failed"),
        ("single", 1, "ok"),
        ("data", 2, "ok"),
    ]
    assert list(gpk.history()["status"]) == ["failed", "ok", "ok"]


def test_cancel_stops_a_comparison_within_two_seconds():
    exp = small_experiment(builders.sleeping_builder, timeout=60)
    cancel = threading.Event()
    pressed = []

    def press_stop():
        pressed.append(time.perf_counter())
        cancel.set()

    timer = threading.Timer(4.0, press_stop)
    timer.start()
    try:
        cmp = exp.compare(["single", "data"], [1, 2], cancel=cancel)
    finally:
        timer.cancel()
    assert time.perf_counter() - pressed[0] < 2
    assert list(cmp.table["status"]) == ["cancelled", "cancelled", "cancelled"]
    assert "not started" in cmp.results[1].reason
    assert len(gpk.history()) == 3
