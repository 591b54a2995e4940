"""The memory each device needs for the model's state, checked against a per-device budget.

Model parallelism exists because a model's parameters and optimizer state can outgrow one device.
A budget (`memory_budget=` bytes per device) lets a CPU-only lab show exactly that: the whole model
is refused on one device and accepted once split. On real (or virtual) GPUs the device's own memory
limit is the real budget; this check counts parameters and optimizer slots only, not activations.

Both backends check it: TensorFlow engines from the replicas' or stages' variables, JAX
strategies from the shards actually placed on each device. No TensorFlow or JAX is imported here.
"""

from __future__ import annotations

from typing import Any

SPLIT_HINT = "split the model over more devices with strategy='pipeline'"


class MemoryBudgetExceeded(MemoryError):
    """A device's parameters and optimizer state do not fit the run's memory budget; `extra`
    is what the refused row keeps (`extra["refused"]`: the state per device and what else the
    backend knew, apart from a finished row's figures), so a figure can draw what did not fit."""

    def __init__(self, message: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.extra = extra or {}


def check_budget(
    state_bytes: dict[str, int],
    budget: int | None,
    hint: str = SPLIT_HINT,
    extra: dict[str, Any] | None = None,
) -> None:
    """Refuse the run when any device's state is over budget, naming the device and the fix."""
    if budget is None or not state_bytes:
        return
    device, needed = max(state_bytes.items(), key=lambda item: item[1])
    if needed > budget:
        raise MemoryBudgetExceeded(
            f"parameters and optimizer state need {needed / 2**20:.1f} MiB on {device}, over the "
            f"memory_budget of {budget / 2**20:.1f} MiB per device; {hint}, or raise "
            "memory_budget",
            {"refused": {"state_bytes": dict(state_bytes), **(extra or {})}},
        )
