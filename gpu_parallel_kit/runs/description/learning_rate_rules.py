"""The learning-rate rule when the global batch grows, and its gradual warmup, on plain numbers.

With k = global batch / the experiment's `batch_size`, the rate is multiplied by k (`linear`,
Goyal et al. 2017), √k (`sqrt`, which keeps the update's variance constant and suits adaptive
optimizers better) or 1 (`none`), ramped up linearly from the base rate over the first
`warmup_epochs`. Strong scaling keeps k = 1. The worker's Keras schedule
(`worker/lr_schedule.py`) evaluates the same formula as `warmup_multiplier`. See
`docs/time-to-accuracy.md`, "The learning-rate rule".
"""

from __future__ import annotations

import math

from ...errors import GpkError

LR_RULES = ("none", "linear", "sqrt")


def lr_factor(rule: str, global_batch: int, base_batch: int) -> float:
    """How much the learning rate is multiplied by for a global batch k = global/base times the
    base batch: k (linear), √k (sqrt) or 1 (none).

    >>> lr_factor("linear", 1024, 256), lr_factor("sqrt", 1024, 256), lr_factor("none", 1024, 256)
    (4.0, 2.0, 1.0)
    """
    check_rule(rule)
    if base_batch <= 0 or global_batch <= 0:
        raise GpkError(
            f"global_batch={global_batch} and base batch={base_batch} must both be positive"
        )
    k = global_batch / base_batch
    if rule == "linear":
        return k
    if rule == "sqrt":
        return math.sqrt(k)
    return 1.0


def warmup_multiplier(step: float, factor: float, ramp_steps: int) -> float:
    """The multiplier of the base learning rate at optimizer step `step` (0 = the first step).

    From 1 at step 0 up to `factor` at step `ramp_steps`, linearly, then `factor`: the rate starts
    at the base rate and reaches the scaled one after the warmup. Without a ramp it is `factor`
    from the first step; with factor 1 there is nothing to ramp.

    >>> [warmup_multiplier(s, 4.0, 4) for s in (0, 1, 2, 4, 9)]
    [1.0, 1.75, 2.5, 4.0, 4.0]
    """
    if ramp_steps <= 0:
        return float(factor)
    return 1.0 + (factor - 1.0) * min(1.0, max(0.0, step) / ramp_steps)


def learning_rate_at(step: float, base_lr: float, factor: float, ramp_steps: int) -> float:
    """The learning rate at optimizer step `step`: the base rate times `warmup_multiplier`."""
    return base_lr * warmup_multiplier(step, factor, ramp_steps)


def ramp_steps(warmup_epochs: float, steps_per_epoch: int) -> int:
    """Optimizer steps of a warmup of `warmup_epochs` epochs (fractions allowed), rounded."""
    return max(0, round(warmup_epochs * steps_per_epoch))


def check_rule(rule: object) -> None:
    if rule not in LR_RULES:
        raise GpkError(
            f"lr_scaling={rule!r} is not known; use 'linear' (Goyal et al.: k times the batch, k "
            "times the rate), 'sqrt' or 'none'"
        )


def check_warmup(warmup_epochs: object, epochs: int) -> None:
    """A warmup is a non-negative number of epochs, no longer than the training."""
    if isinstance(warmup_epochs, bool) or not isinstance(warmup_epochs, int | float):
        raise TypeError(f"warmup_epochs={warmup_epochs!r} must be a number of epochs, e.g. 1")
    if not math.isfinite(warmup_epochs) or warmup_epochs < 0:
        raise GpkError(f"warmup_epochs={warmup_epochs} must be 0 or more epochs")
    if warmup_epochs > epochs:
        raise GpkError(
            f"warmup_epochs={warmup_epochs:g} is longer than the training (epochs={epochs}); "
            f"use at most {epochs}"
        )
