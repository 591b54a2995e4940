"""The fast path trains what single-device training trains: tune's settings change the speed,
not the weights; XLA within its tolerance; and the row says what was chosen and measured."""

from __future__ import annotations

import math

import pytest

from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table, format_table
from tests.builders import largest_difference, saved_weights, small_mlp

pytestmark = pytest.mark.slow

# XLA fuses and reorders float32 arithmetic, so its results match the plain graph's up to
# rounding, not bit for bit. Over these 24 SGD steps the weights differed by 6e-8 when measured:
# the equivalence tests' own 1e-5 holds with XLA too.
XLA_TOLERANCE = 1e-5


# 8 steps x 3 epochs: tune picks 4 steps per execution (8 would leave 2 timed executions).
EXPERIMENT = dict(model=small_mlp, epochs=3, steps_per_epoch=8)  # tests/engines/conftest.py


def _train(experiment, tmp_path, strategy, devices, **plan):
    path = tmp_path / f"{strategy}_{devices}_{len(list(tmp_path.iterdir()))}.npz"
    result = experiment.run(strategy=strategy, devices=devices, save_weights=str(path), **plan)
    assert result.ok, result.reason
    return result, saved_weights(path)


def test_tuned_runs_train_the_weights_of_untuned_single_device_training(experiment, tmp_path):
    plain, reference = _train(experiment, tmp_path, "single", 1, tune="off")
    assert plain.extra["tuned"]["steps_per_execution"] == 1
    for strategy, devices in (("single", 1), ("data", 2)):
        result, weights = _train(experiment, tmp_path, strategy, devices)
        tuned = result.extra["tuned"]
        assert (tuned["tune"], tuned["steps_per_execution"], tuned["jit_compile"]) == (
            "auto", 4, False,
        )  # fmt: skip
        difference = largest_difference(weights, reference)
        assert difference <= 1e-5, f"{strategy} x{devices} drifted by {difference}"


def test_step_times_with_several_steps_per_execution_are_execution_times_divided(experiment):
    result = experiment.run(strategy="data", devices=2, steps_per_execution=4)
    assert result.ok, result.reason
    assert result.extra["tuned"]["why"]["steps_per_execution"] == "user"
    # Warm-up is the first whole execution; each later execution's 4 steps share its time.
    assert result.warmup_steps == 4 and len(result.step_times_s) == 24 - 4
    for start in range(0, len(result.step_times_s), 4):
        execution = result.step_times_s[start : start + 4]
        assert max(execution) - min(execution) <= 1e-6 * max(execution), execution
    assert "execution's time / 4" in result.extra["step_time_method"]
    assert result.throughput_samples_s == pytest.approx(32 / result.step_time_s)
    assert result.extra["timer_async"] is False  # TensorFlow's fit calls back in line


def test_xla_stays_within_its_tolerance_of_the_plain_graph(experiment, tmp_path):
    _, reference = _train(experiment, tmp_path, "single", 1, tune="off")
    result, weights = _train(experiment, tmp_path, "single", 1, jit_compile=True)
    assert result.extra["tuned"]["jit_compile"] is True
    assert result.extra["tuned"]["why"]["jit_compile"] == "user"
    assert largest_difference(weights, reference) <= XLA_TOLERANCE


def test_a_run_without_the_communication_measurement_says_so(experiment):
    result = experiment.run(strategy="data", devices=2, measure_comm=False)
    assert result.ok, result.reason
    assert result.comm_time_s is None and result.comm_share is None
    assert result.extra["comm_measured"] is False
    assert "standalone_all_reduce_s" not in result.extra
    assert result.extra["comm_method"] == "not measured (measure_comm=False)"
    table = comparison_table([result])
    assert not table["comm_measured"].iloc[0] and math.isnan(table["compute_time_s"].iloc[0])
    assert "not measured" in format_table(table)
