"""What tune="auto" picks (runs/description/tuning_rules.py), on plain values: every rule, and the
user's choice winning over each."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.description.tuning_rules import (
    MIN_TIMED_EXECUTIONS,
    TARGET_STEPS_PER_EXECUTION,
    choose_settings,
    tuned_steps_per_execution,
    warmup_in_executions,
)


def settings(**overrides):
    values = dict(
        tune="auto",
        backend="tensorflow",
        strategy="data",
        mode="fit",
        device_kind="cpu",
        devices=2,
        steps_per_epoch=32,
        total_steps=64,
        warmup_steps=2,
    )
    return choose_settings(**{**values, **overrides})


def test_auto_runs_the_target_steps_per_execution_when_the_run_holds_them():
    tuned = settings()
    assert tuned.steps_per_execution == TARGET_STEPS_PER_EXECUTION == 8
    assert tuned.jit_compile is False  # on the CPU (measured slower): off, said explicitly
    assert tuned.prefetch_batches == 16  # two executions ahead
    assert tuned.why["steps_per_execution"].startswith("tune:")


@pytest.mark.parametrize(
    ("steps_per_epoch", "epochs", "every", "expected"),
    [
        (20, 4, None, 5),  # 8, 7, 6 do not divide 20
        (16, 2, None, 4),  # 8 would leave 3 timed executions after a warm-up of one
        (16, 2, 6, 2),  # executions must end where evaluations are due: gcd(16, 6)
        (7, 6, None, 7),  # a prime epoch: the epoch itself, when the run holds enough
        (7, 1, None, 1),  # ... and one step at a time when it does not
        (2, 1, None, 1),  # a two-step run: nothing to gain, the median needs the steps
    ],
)
def test_steps_per_execution_divides_the_epoch_and_leaves_executions_to_time(
    steps_per_epoch, epochs, every, expected
):
    total = steps_per_epoch * epochs
    warm = min(2, total // 2)
    spe = tuned_steps_per_execution(steps_per_epoch, total, warm, every)
    assert spe == expected
    assert steps_per_epoch % spe == 0 and (every or spe) % spe == 0
    timed = (total - warmup_in_executions(warm, spe, total)) // spe
    assert spe == 1 or timed >= MIN_TIMED_EXECUTIONS


def test_warm_up_is_rounded_up_to_whole_executions_and_leaves_one_timed():
    assert warmup_in_executions(2, 4, 32) == 4
    assert warmup_in_executions(5, 4, 32) == 8
    assert warmup_in_executions(0, 4, 32) == 0
    assert warmup_in_executions(2, 8, 8) == 0  # one execution in all: it is the one timed
    assert warmup_in_executions(2, 1, 10) == 2


def test_the_users_own_choices_win_over_tune():
    tuned = settings(steps_per_execution=3, jit_compile=True)
    assert (tuned.steps_per_execution, tuned.jit_compile) == (3, True)
    assert tuned.why["steps_per_execution"] == tuned.why["jit_compile"] == "user"
    # With tune off too.
    off = settings(tune="off", steps_per_execution=2)
    assert off.steps_per_execution == 2 and off.why["steps_per_execution"] == "user"


def test_off_keeps_kerass_defaults():
    tuned = settings(tune="off")
    assert (tuned.steps_per_execution, tuned.jit_compile, tuned.prefetch_batches) == (1, None, None)
    assert tuned.to_dict()["tune"] == "off"


@pytest.mark.parametrize(
    ("strategy", "mode"), [("data", "explicit"), ("model", "fit"), ("multiworker", "explicit")]
)
def test_loops_other_than_fit_are_left_alone(strategy, mode):
    tuned = settings(strategy=strategy, mode=mode)
    assert (tuned.steps_per_execution, tuned.jit_compile, tuned.prefetch_batches) == (1, None, None)
    assert tuned.why["steps_per_execution"].startswith("not used by")


@pytest.mark.parametrize(
    ("kind", "strategy", "devices", "deterministic", "xla"),
    [
        ("gpu", "single", 1, False, True),  # what Keras's auto picks on one GPU, no strategy
        # Elsewhere left to Keras's auto (None), which is off under a strategy:
        ("gpu", "single", 1, True, None),  # Keras refuses XLA with op determinism
        ("gpu", "data", 2, False, None),  # Keras keeps XLA off under tf.distribute
        # Measured slower on the CPU; said, since Keras's auto would turn it on without a
        # strategy on a machine that also has a GPU.
        ("cpu", "single", 1, False, False),
        ("cpu", "data", 2, False, False),
    ],
)
def test_xla_where_a_users_own_fit_would_have_it(kind, strategy, devices, deterministic, xla):
    tuned = settings(
        device_kind=kind, strategy=strategy, devices=devices, deterministic=deterministic
    )
    assert tuned.jit_compile is xla, tuned.why["jit_compile"]


def test_jax_rows_give_jax_reasons_not_tensorflows():
    for strategy, devices in (("single", 1), ("data", 2), ("tensor", 2)):
        tuned = settings(backend="jax", strategy=strategy, devices=devices, device_kind="gpu")
        reasons = " ".join(tuned.why.values())
        assert "tf.data" not in reasons and "MirroredStrategy" not in reasons, reasons
        assert "tf.distribute" not in reasons, reasons
        assert tuned.prefetch_batches is None  # a PyDataset reads batch by batch
        assert "PyDataset" in tuned.why["prefetch"]
        assert tuned.jit_compile is None and "XLA compiles every step" in tuned.why["jit_compile"]


def test_a_jax_tensor_run_trains_with_fit_so_tune_applies():
    tuned = settings(backend="jax", strategy="tensor", devices=2)
    assert tuned.steps_per_execution == TARGET_STEPS_PER_EXECUTION
    assert tuned.why["steps_per_execution"].startswith("tune:")
    assert "its own loop" not in " ".join(tuned.why.values())


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("tune", "fast", "tune='fast' is not known; use 'auto'"),
        ("measure_comm", "no", "measure_comm='no' must be True or False"),
        ("steps_per_execution", 0, "steps_per_execution=0 is too few; use steps_per_execution=1"),
        ("jit_compile", "yes", "jit_compile='yes' must be True, False or None"),
    ],
)
def test_a_bad_value_is_one_sentence_before_any_worker(option, value, message):
    exp = gpk.Experiment(model="mlp", samples=512, batch_size=64, progress=False)
    with pytest.raises(GpkError, match=message):
        exp.plan("data", 2, **{option: value})
    if option in ("tune", "measure_comm"):
        with pytest.raises(GpkError, match=message):
            gpk.Experiment(model="mlp", samples=512, batch_size=64, **{option: value})


def test_a_runs_own_tune_overrides_the_experiments():
    exp = gpk.Experiment(model="mlp", samples=512, batch_size=64, tune="off", measure_comm=False)
    assert (exp.plan("data", 2).tune, exp.plan("data", 2).measure_comm) == ("off", False)
    spec = exp.plan("data", 2, tune="auto", measure_comm=True, steps_per_execution=4)
    assert (spec.tune, spec.measure_comm, spec.steps_per_execution) == ("auto", True, 4)
