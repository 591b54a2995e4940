"""What a pipeline's devices hold, part by part, for the memory budget (`worker/budget.py`):
each stage's variables and optimizer slots, a gradient per parameter, and the activations of
the micro-batches its schedule keeps in flight at most."""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from ....pipeline.schedules import Schedule, Task, max_live_micro_batches
from ..engines.budget import check_budget
from .stages import bytes_per_sample


def activation_bytes_per_micro_batch(stages: list[Any], traced: Any, sample: Any) -> list[int]:
    """Bytes of every layer output one micro-batch (`sample`) leaves on each stage, from the
    traced graph's tensor shapes."""
    samples = int(tf.nest.flatten(sample)[0].shape[0])
    calls = {call.name: call for call in traced.graph.calls}
    return [
        samples
        * sum(
            bytes_per_sample(traced.tensors[name])
            for layer in stage.layer_names
            for name in calls[layer].outputs
        )
        for stage in stages
    ]


def stage_memory(stages: list[Any], held: list[float] | None) -> dict[str, Any]:
    """Each device's parts under a pipeline: its stages' variables and optimizer slots, one
    gradient per parameter, and the activations its schedule keeps in flight (`held`, per
    stage; None before the micro-batches are chosen, when they are not yet known)."""
    devices: dict[str, dict[str, float]] = {}
    for stage in stages:
        parts = devices.setdefault(
            stage.device,
            {
                "params_bytes": 0,
                "grads_bytes": 0,
                "optimizer_bytes": 0,
                "activations_bytes": 0.0 if held is not None else math.nan,
            },
        )
        parts["params_bytes"] += stage.parameter_bytes
        parts["grads_bytes"] += stage.parameter_bytes
        parts["optimizer_bytes"] += stage.optimizer_bytes
        if held is not None:
            parts["activations_bytes"] += held[stage.index]
    return {
        "devices": devices,
        "how": {
            "params_bytes": "measured: the stage's variables",
            "grads_bytes": "modelled: one gradient per parameter",
            "optimizer_bytes": "measured: the stage's optimizer slots",
            "activations_bytes": (
                "modelled: each stage's layer outputs for the micro-batches its schedule keeps "
                "in flight at most"
                if held is not None
                else "not known before the micro-batches are chosen"
            ),
        },
    }


def check_stages(
    stages: list[Any],
    budget: int | None,
    traced: Any = None,
    micro_batch: Any = None,
    schedule: Schedule | None = None,
) -> None:
    """The budget against the stages' model states (before the micro-batches are chosen, so
    before the curve's timing), then, given the `schedule`, with the activations each stage
    holds for the most micro-batches (like `micro_batch`) it keeps in flight."""
    if budget is None:
        return
    held = None if schedule is None else held_activations(stages, traced, micro_batch, schedule)
    keys = ("device", "parameter_bytes", "optimizer_bytes")  # what a refused row keeps
    kept = [{key: getattr(s, key) for key in keys} for s in stages]
    check_budget(stage_memory(stages, held), budget, extra={"stages": kept})


def held_activations(
    stages: list[Any], traced: Any, micro_batch: Any, schedule: Schedule
) -> list[float]:
    """Per stage, the bytes of activations it holds for the most micro-batches (like
    `micro_batch`) its schedule keeps in flight."""
    per_micro_batch = activation_bytes_per_micro_batch(stages, traced, micro_batch)
    return [
        float(max_live_micro_batches(_tasks_of(schedule, s.index)) * per_micro_batch[s.index])
        for s in stages
    ]


def _tasks_of(schedule: Schedule, stage: int) -> list[Task]:
    return [task for tasks in schedule for task in tasks if task.stage == stage]
