"""The learning-rate rule applied to the user's compiled optimizer, inside the worker.

The factor and the warmup length are worked out on plain numbers
(`runs/description/learning_rate_rules.py`); this module only installs them. A constant rate is
assigned; a warmup (or an optimizer that already follows its own schedule) becomes a `ScaledWarmup`
schedule, which Keras evaluates at every optimizer step in `fit`, in the explicit loop and in each
pipeline stage's own optimizer alike (the stages copy the optimizer's config, schedule included, and
count their own steps: one per global batch).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import keras

from ..errors import GpkError
from ..runs.description.learning_rate_rules import ramp_steps
from ..runs.description.run_spec import RunSpec
from .keras_internals import raw_learning_rate


@keras.saving.register_keras_serializable(package="gpu_parallel_kit")
class ScaledWarmup(keras.optimizers.schedules.LearningRateSchedule):
    """base(step) × m(step), m ramping linearly from 1 to `factor` over `ramp_steps` steps.

    `base` is the optimizer's own rate: a number or its own schedule. This is
    `lr_rules.learning_rate_at` in Keras operations (Goyal et al.'s gradual warmup).

    >>> ScaledWarmup(0.1, factor=4.0, ramp_steps=10)(5)  # 0.1 × 2.5
    """

    def __init__(self, base: Any, factor: float, ramp_steps: int) -> None:
        super().__init__()
        self.base = base
        self.factor = float(factor)
        self.ramp_steps = int(ramp_steps)

    def __call__(self, step):
        base = self.base(step) if callable(self.base) else self.base
        base = keras.ops.cast(base, "float32")
        step = keras.ops.cast(step, "float32")
        if self.ramp_steps <= 0:
            return base * self.factor
        progress = keras.ops.minimum(1.0, step / float(self.ramp_steps))
        return base * (1.0 + (self.factor - 1.0) * progress)

    def get_config(self) -> dict[str, Any]:
        base = self.base
        if isinstance(base, keras.optimizers.schedules.LearningRateSchedule):
            base = keras.saving.serialize_keras_object(base)
        return {"base": base, "factor": self.factor, "ramp_steps": self.ramp_steps}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ScaledWarmup:
        base = config["base"]
        if isinstance(base, dict):
            base = keras.saving.deserialize_keras_object(base)
        return cls(base, config["factor"], config["ramp_steps"])


class LearningRates(NamedTuple):
    """A run's learning rate before and after its rule scaled it."""

    base: float  # the optimizer's own rate at step 0
    peak: float  # the rate the rule reaches: base × factor, after any ramp


def apply_lr_rule(
    optimizer: keras.optimizers.Optimizer, factor: float, ramp_steps: int
) -> LearningRates:
    """Scale the optimizer's rate by `factor`, ramping over `ramp_steps` steps when asked.

    Returns (the optimizer's own rate at step 0, the effective peak rate). Leaves the optimizer
    untouched when the factor is 1 (a ramp from the base rate to itself changes nothing).
    """
    current = raw_learning_rate(optimizer)
    base = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
    if factor == 1.0:
        return LearningRates(base, base)
    if isinstance(current, keras.Variable):
        if ramp_steps <= 0:
            optimizer.learning_rate = base * factor
        else:
            optimizer.learning_rate = ScaledWarmup(base, factor, ramp_steps)
    elif isinstance(current, keras.optimizers.schedules.LearningRateSchedule):
        optimizer.learning_rate = ScaledWarmup(current, factor, ramp_steps)
    else:
        raise GpkError(
            f"the optimizer's learning rate is a {type(current).__name__}, which lr_scaling "
            "cannot scale; give the optimizer a number or a LearningRateSchedule"
        )
    return LearningRates(base, base * factor)


def apply_run_rule(
    optimizer: keras.optimizers.Optimizer, spec: RunSpec, steps_per_epoch: int
) -> LearningRates:
    """The run's own rule on its optimizer: the factor its global batch gives, ramped over its
    warmup epochs (both backends apply it so)."""
    return apply_lr_rule(
        optimizer,
        spec.training.lr_factor(spec.global_batch),
        ramp_steps(spec.training.warmup_epochs, steps_per_epoch),
    )
