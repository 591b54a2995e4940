"""The worker's side of `tune`: what the user already chose, then the rules of
runs/description/tuning_rules.py.

A user's choice can come two ways: the run's own `steps_per_execution=`/`jit_compile=`, or the
model's builder, which compiled it with them. Either wins over tune's rules.
"""

from __future__ import annotations

import keras

from ..runs.description.run_spec import RunSpec
from ..runs.description.tuning_rules import Tuned, choose_settings
from ..strategies import strategy_record
from .keras_internals import compile_config


def tune_run(
    spec: RunSpec, model: keras.Model, steps_per_epoch: int, total_steps: int, warmup: int
) -> Tuned:
    """The settings this run compiles and feeds its model with."""
    own = compile_config(model)  # {} when the builder did not compile
    spe = spec.steps_per_execution
    if spe is None and own.get("steps_per_execution", 1) not in (None, 1):
        spe = int(own["steps_per_execution"])
    jit = spec.jit_compile
    if jit is None and own.get("jit_compile") is True:
        jit = True
    return choose_settings(
        tune=spec.tune,
        backend=spec.backend,
        strategy=spec.strategy,
        mode=spec.mode,
        device_kind=spec.devices.kind,
        devices=spec.replicas,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        warmup_steps=warmup,
        evaluate_every_steps=spec.training.validation_every_steps,
        deterministic=spec.training.deterministic,
        steps_per_execution=spe,
        jit_compile=jit,
        steps_together=strategy_record(spec.strategy).steps_together(spec),
    )
