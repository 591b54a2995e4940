"""Time to accuracy in real workers on 2 virtual devices: validation in every engine and loop,
the learning-rate rule with its warmup, evaluation left out of the timings, and determinism."""

from __future__ import annotations

import math

import pytest

import gpu_parallel_kit as gpk
from tests.builders import separable_data, small_mlp

pytestmark = pytest.mark.slow

TARGET = {"val_accuracy": 0.9}


def _experiment(**settings):
    defaults = dict(
        model=small_mlp,
        data=separable_data(512),
        validation=separable_data(128, seed=1),
        metrics=["accuracy"],
        batch_size=32,
        epochs=3,
        progress=False,
    )
    return gpk.Experiment(**{**defaults, **settings})


@pytest.fixture(scope="module")
def strong():
    """single and data×2 under strong scaling: the same batches, so the same curve."""
    experiment = _experiment(target=TARGET)
    return experiment, experiment.compare(strategies=["single", "data"], devices=[2])


def test_single_and_data_parallel_reach_the_target_with_the_same_curve(strong):
    _, comparison = strong
    single, data = comparison.results
    assert (single.strategy, data.strategy, data.devices) == ("single", "data", 2)
    assert single.ok and data.ok, (single.reason, data.reason)
    table = comparison.table.set_index("strategy")
    assert table["target_reached"].tolist() == [True, True]
    assert (table["time_to_target_s"] > 0).all()
    assert table.loc["single", "epochs_to_target"] == table.loc["data", "epochs_to_target"]
    for name in ("val_loss", "val_accuracy"):
        assert data.history[name] == pytest.approx(single.history[name], abs=1e-5), name
    assert table["learning_rate"].tolist() == pytest.approx([0.1, 0.1])  # strong: kept
    assert "Target val_accuracy >= 0.9: single×1 in" in comparison.convergence


def test_evaluations_carry_their_epoch_and_training_time_and_stay_out_of_the_step_times(strong):
    _, comparison = strong
    for run in comparison.results:
        assert [e["epoch"] for e in run.evaluations] == [1.0, 2.0, 3.0]
        times = [e["time_s"] for e in run.evaluations]
        assert times == sorted(times) and times[0] > 0
        # Epoch ends come after their last step (Keras's epoch bookkeeping is training too).
        assert len(run.history_time_s) == 3 and run.history_time_s[-1] >= run.wall_time_s
        # Training time excludes the evaluations; the raw clock includes them.
        assert run.evaluations[-1]["wall_time_s"] > run.evaluations[-1]["time_s"]
        assert run.evaluation_time_s > 0
        assert len(run.step_times_s) == 3 * 16 - run.warmup_steps
        # That no step swallows an evaluation is checked on a fake clock below, not on timings.


def test_the_pipeline_evaluates_through_its_stages(strong):
    experiment, comparison = strong
    single = comparison.results[0]
    run = experiment.run(strategy="pipeline", devices=2, micro_batches=2)
    assert run.ok, run.reason
    assert run.history["val_loss"] == pytest.approx(single.history["val_loss"], abs=1e-4)
    assert run.history["val_accuracy"] == pytest.approx(single.history["val_accuracy"], abs=1e-4)
    assert gpk.Comparison([single, run]).table["target_reached"].tolist() == [True, True]


def test_weak_scaling_scales_the_rate_and_warms_it_up_in_the_explicit_loop():
    experiment = _experiment(validation=0.25, validation_every_steps=4, epochs=2)
    run = experiment.run(
        strategy="data",
        devices=2,
        mode="explicit",
        scaling="weak",
        lr_scaling="linear",
        warmup_epochs=1,
        target=TARGET,
    )
    assert run.ok, run.reason
    assert run.global_batch == 64 and run.steps_per_epoch == 6  # 384 training samples
    assert (run.base_learning_rate, run.learning_rate) == pytest.approx((0.1, 0.2))
    assert run.lr_factor == 2.0 and run.lr_scaling == "linear"
    assert [e["step"] for e in run.evaluations] == [4, 8, 12]
    rates = [e["learning_rate"] for e in run.evaluations]
    # Goyal's ramp over the first 6 steps: 0.1 × (1 + 4/6) after 4 steps, then 0.2.
    assert rates == pytest.approx([0.1 * (1 + 4 / 6), 0.2, 0.2], rel=1e-5)
    assert [e["epoch"] for e in run.evaluations] == pytest.approx([4 / 6, 8 / 6, 2.0])
    assert all(math.isfinite(e["val_loss"]) for e in run.evaluations)


def test_the_deterministic_option_gives_identical_loss_histories():
    experiment = _experiment(deterministic=True, epochs=2, seed=3)
    first, second = (experiment.run(strategy="data", devices=2) for _ in range(2))
    assert first.ok and second.ok, (first.reason, second.reason)
    assert first.deterministic
    assert first.history["loss"] == second.history["loss"]
    assert first.history["val_loss"] == second.history["val_loss"]


def test_the_recorder_pauses_its_clock_while_evaluating(monkeypatch):
    # In the test: the recorder imports Keras, which the fast subset's collection must not.
    from gpu_parallel_kit.worker.measuring import recorder as recorder_module

    clock = iter([0.0, 1.0, 2.0, 2.0, 2.0, 12.0, 13.0, 13.0, 13.0, 13.0])
    monkeypatch.setattr(recorder_module.time, "perf_counter", lambda: next(clock))
    recorder = recorder_module.StepRecorder(3, lambda **_: None, warmup_steps=0)
    recorder.evaluate = lambda: {"val_loss": 0.5}
    recorder.evaluate_every_steps = 2
    recorder.train_begin()  # 0
    recorder.step_end()  # 1
    recorder.step_end()  # 2: evaluates from 2 to 12
    recorder.step_end()  # 13 on the clock, 3 s of training; the last step evaluates too
    summary = recorder.summary()
    assert summary["step_times_s"] == pytest.approx((1.0, 1.0, 1.0))
    assert summary["wall_time_s"] == pytest.approx(3.0)
    assert [e["time_s"] for e in recorder.evaluations] == pytest.approx([2.0, 3.0])
    assert [e["wall_time_s"] for e in recorder.evaluations] == pytest.approx([2.0, 13.0])
    assert summary["evaluation_time_s"] == pytest.approx(10.0)
