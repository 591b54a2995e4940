"""The learning-rate rule and its warmup, on plain numbers."""

from __future__ import annotations

import math

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.description.learning_rate_rules import (
    check_rule,
    check_warmup,
    learning_rate_at,
    lr_factor,
    ramp_steps,
    warmup_multiplier,
)


@pytest.mark.parametrize(
    ("rule", "global_batch", "expected"),
    [
        ("linear", 256, 1.0),
        ("linear", 512, 2.0),
        ("linear", 1024, 4.0),
        ("sqrt", 1024, 2.0),
        ("sqrt", 512, math.sqrt(2)),
        ("none", 1024, 1.0),
    ],
)
def test_the_factor_follows_k_global_over_base(rule, global_batch, expected):
    assert lr_factor(rule, global_batch, 256) == pytest.approx(expected)


def test_strong_scaling_keeps_the_rate_whatever_the_rule():
    # Strong scaling: the global batch is the base batch, so k = 1.
    assert {lr_factor(rule, 256, 256) for rule in ("linear", "sqrt", "none")} == {1.0}


def test_warmup_ramps_linearly_from_the_base_to_the_scaled_rate():
    # Goyal et al.: from eta at step 0 to k * eta at the end of the warmup, then flat.
    assert [warmup_multiplier(s, 4.0, 6) for s in range(9)] == pytest.approx(
        [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.0, 4.0]
    )
    assert learning_rate_at(3, 0.1, 4.0, 6) == pytest.approx(0.25)


def test_without_a_ramp_the_scaled_rate_starts_at_once():
    assert warmup_multiplier(0, 4.0, 0) == 4.0
    assert warmup_multiplier(100, 4.0, 0) == 4.0


def test_a_ramp_to_the_same_rate_changes_nothing():
    assert {warmup_multiplier(s, 1.0, 5) for s in range(8)} == {1.0}


def test_warmup_epochs_become_steps_rounded():
    assert ramp_steps(1, 16) == 16
    assert ramp_steps(0.5, 15) == 8
    assert ramp_steps(0, 16) == 0


def test_an_unknown_rule_is_one_sentence():
    with pytest.raises(GpkError, match="lr_scaling='cubic' is not known; use 'linear'"):
        check_rule("cubic")


@pytest.mark.parametrize(
    ("warmup", "error", "message"),
    [
        (-1, GpkError, "warmup_epochs=-1 must be 0 or more"),
        (3, GpkError, r"warmup_epochs=3 is longer than the training \(epochs=2\); use at most 2"),
        ("1", TypeError, "must be a number of epochs"),
        (True, TypeError, "must be a number of epochs"),
    ],
)
def test_bad_warmups(warmup, error, message):
    with pytest.raises(error, match=message):
        check_warmup(warmup, 2)
