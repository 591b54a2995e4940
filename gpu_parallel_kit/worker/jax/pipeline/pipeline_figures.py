"""What a JAX pipeline reports of its stages: each stage's cut, devices, state and activations,
its memory by part per device, beside the schedule's figures (`worker/pipeline/timeline.py`).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import keras
import numpy as np

from ....pipeline.schedules import Schedule, max_live_micro_batches
from ...pipeline.timeline import busy_and_idle, schedule_figures
from ..device_setup import device_names
from .stage_mesh import held_bytes


def figures(
    stages: list[Any], traced: Any, schedule: Schedule, reports: list[Any], spec: Any, sample: Any
) -> dict[str, Any]:
    """The schedule's figures and, per stage, its layers, what crosses into it, where its
    arrays live, its busy and idle time and the activations it held at most."""
    found = schedule_figures(schedule, reports, spec)
    timed = [r.tasks for r in reports if r.tasks and not r.serial]
    trained = [r for r in reports if not r.serial]
    n = len(stages)
    peak_live = [max(r.peak_live[s] for r in trained) for s in range(n)] if trained else [0] * n
    per_micro_batch = activation_bytes(stages, traced, sample)
    found["stages"] = [
        {
            "stage": s.index,
            "device": device_names([s.device])[0],
            "layers": list(s.cut.calls),
            "first_layer": s.cut.calls[0],
            "last_layer": s.cut.calls[-1],
            "receives": [
                {
                    "tensor": name,
                    "shape": list(traced.tensors[name].shape[1:]),
                    "bytes_per_sample": tensor_bytes(traced.tensors[name]),
                }
                for name in s.cut.received
            ],
            "parameter_bytes": _nbytes([*s.trainable, *s.non_trainable]),
            "optimizer_bytes": _nbytes(s.optimizer_state),
            "variable_devices": sorted(array_devices(s)),
            "peak_live_micro_batches": peak_live[s.index],
            "activation_bytes_held": peak_live[s.index] * per_micro_batch[s.index],
            **busy_and_idle(timed, s.index),
        }
        for s in stages
    ]
    return found


def stage_memory(
    stages: list[Any], traced: Any, schedule: Schedule | None = None, sample: Any = None
) -> dict:
    """Each device's parts under the pipeline: its stages' arrays and optimizer state
    (measured), one gradient sum per weight (measured: the arrays the stage keeps), and the
    activations of the micro-batches its schedule keeps in flight at most (modelled; not known
    before the micro-batches are chosen, without a `schedule`)."""
    per_micro_batch = activation_bytes(stages, traced, sample) if schedule else []
    devices: dict[str, dict[str, float]] = {}
    for stage in stages:
        data = stage.placement.shape[0]
        held = {
            "params_bytes": held_bytes([*stage.trainable, *stage.non_trainable]),
            "grads_bytes": held_bytes(stage.accumulated),
            "optimizer_bytes": held_bytes(stage.optimizer_state),
        }
        activations = math.nan
        if schedule is not None:
            tasks = [t for device in schedule for t in device if t.stage == stage.index]
            # Each data replica of the stage's mesh holds its share of every micro-batch.
            activations = max_live_micro_batches(tasks) * per_micro_batch[stage.index] / data
        for name in stage.placement.names:
            parts = devices.setdefault(
                name,
                {
                    "params_bytes": 0,
                    "grads_bytes": 0,
                    "optimizer_bytes": 0,
                    "activations_bytes": 0.0,
                },
            )
            for part, by_device in held.items():
                parts[part] += by_device.get(name, 0)
            parts["activations_bytes"] += float(activations)
    return {
        "devices": devices,
        "how": {
            "params_bytes": "measured: the stage's arrays (or their shards) on its device",
            "grads_bytes": "measured: the stage's gradient sums (or their shards) on its device",
            "optimizer_bytes": "measured: the stage's optimizer state (or shards) on its device",
            "activations_bytes": (
                "modelled: each stage's layer outputs for the micro-batches its schedule keeps "
                "in flight at most (a share of each over a stage's data axis)"
                if schedule is not None
                else "not known before the micro-batches are chosen"
            ),
        },
    }


def activation_bytes(stages: list[Any], traced: Any, sample: Any) -> list[int]:
    """Bytes of every layer output one micro-batch (`sample`) leaves on each stage, from the
    traced graph's tensor shapes."""
    samples = int(np.shape(keras.tree.flatten(sample)[0])[0])
    calls = {call.name: call for call in traced.graph.calls}
    return [
        samples
        * sum(
            tensor_bytes(traced.tensors[name])
            for layer in s.cut.calls
            for name in calls[layer].outputs
        )
        for s in stages
    ]


def tensor_bytes(tensor: keras.KerasTensor) -> int:
    """Bytes per sample, from the symbolic shape; an unknown length counts as 1."""
    size = int(np.prod([d or 1 for d in tensor.shape[1:]]))
    return size * jax.numpy.dtype(keras.backend.standardize_dtype(tensor.dtype)).itemsize


def array_devices(stage: Any) -> set[str]:
    """Where the stage's weights, statistics, gradient sums and optimizer state really are."""
    arrays = [*stage.trainable, *stage.non_trainable, *stage.accumulated, *stage.optimizer_state]
    return {name for a in arrays for name in device_names(list(a.devices()))}


def _nbytes(values: list[Any]) -> int:
    return sum(int(v.nbytes) for v in values)
