"""The plain-spawn fallback works like the fork server, and the start method is validated."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.runs.processes.child_process import start_method
from tests.builders import small_experiment, small_mlp


@pytest.mark.slow
def test_spawned_worker_trains(monkeypatch):
    monkeypatch.setenv("GPK_START_METHOD", "spawn")
    exp = small_experiment(small_mlp)
    result = exp.run(strategy="data", devices=2)
    assert result.status == "ok", result.reason
    assert result.devices == 2 and len(result.step_times_s) == 3 - result.warmup_steps


def test_unknown_start_method(monkeypatch):
    monkeypatch.setenv("GPK_START_METHOD", "fork")
    with pytest.raises(gpk.GpkError, match="GPK_START_METHOD='fork' is not known"):
        start_method()


@pytest.mark.slow
def test_a_front_end_can_follow_each_run_with_its_own_display():
    seen = []

    class Display:
        def __init__(self, spec):
            self.spec = spec

        def __call__(self, event):
            seen.append(event["event"])

        def close(self, result):
            seen.append(("closed", self.spec.strategy, result.status))

    exp = small_experiment(small_mlp, progress=Display)
    exp.run(strategy="data", devices=2)
    assert "phase" in seen and "progress" in seen
    assert seen[-1] == ("closed", "data", "ok")
