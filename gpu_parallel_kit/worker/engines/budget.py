"""The memory each device needs for the model's state, checked against a per-device budget.

Model parallelism exists because a model's parameters and optimizer state can outgrow one device.
A budget (`memory_budget=` bytes per device) lets a CPU-only lab show exactly that: the whole model
is refused on one device and accepted once split. On real (or virtual) GPUs the device's own memory
limit is the real budget; this check counts parameters and optimizer slots only, not activations.
"""

from __future__ import annotations

from collections.abc import Iterable

import tensorflow as tf


class MemoryBudgetExceeded(MemoryError):
    """A device's parameters and optimizer state do not fit the run's memory budget."""


def variable_bytes(variables: Iterable) -> int:
    total = 0
    for variable in variables:
        total += (
            int(tf.TensorShape(variable.shape).num_elements() or 0)
            * tf.as_dtype(variable.dtype).size
        )
    return total


def check_budget(state_bytes: dict[str, int], budget: int | None) -> None:
    """Refuse the run when any device's state is over budget, naming the device and the fix."""
    if budget is None:
        return
    device, needed = max(state_bytes.items(), key=lambda item: item[1])
    if needed > budget:
        raise MemoryBudgetExceeded(
            f"parameters and optimizer state need {needed / 2**20:.1f} MiB on {device}, over the "
            f"memory_budget of {budget / 2**20:.1f} MiB per device; split the model over more "
            "devices with strategy='model', or raise memory_budget"
        )
