"""The memory each device needs, part by part, checked against a per-device budget.

A budget (`memory_budget=` bytes per device) lets a CPU-only lab show why model parallelism
exists: the whole model is refused on one device and accepted once split. The budget counts
parameters, gradients, optimizer state and the activations kept for the backward, as engines
give them per device, measured where the backend can say and modelled where it cannot; a part
an engine could not model is left out of the sum, and the refusal says so. No TensorFlow or JAX
is imported here. See `docs/memory.md`.
"""

from __future__ import annotations

import math
from typing import Any

SPLIT_HINT = "split the model over more devices with strategy='pipeline'"
PARTS = {
    "params_bytes": "parameters",
    "grads_bytes": "gradients",
    "optimizer_bytes": "optimizer state",
    "activations_bytes": "activations",
}
MIB = 2**20


class MemoryBudgetExceeded(MemoryError):
    """A device's memory does not fit the run's budget; `extra` is what the refused row keeps
    (`extra["refused"]`: each device's parts and what else the backend knew, apart from a
    finished row's figures), so a figure can draw what did not fit."""

    def __init__(self, message: str, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.extra = extra or {}


def known(value: Any) -> bool:
    return isinstance(value, int | float) and not math.isnan(value)


def needed_bytes(parts: dict[str, float]) -> float:
    """What a device needs: the sum of its parts that are known."""
    return sum(parts[name] for name in PARTS if known(parts.get(name)))


def state_bytes(memory: dict[str, Any]) -> dict[str, int]:
    """Per device, parameters and optimizer state: the `state_bytes` figure rows carry."""
    return {
        name: int(held.get("params_bytes", 0) + held.get("optimizer_bytes", 0))
        for name, held in (memory.get("devices") or {}).items()
    }


def check_budget(
    memory: dict[str, Any],
    budget: int | None,
    hint: str = SPLIT_HINT,
    extra: dict[str, Any] | None = None,
) -> None:
    """Refuse the run when any device needs more than the budget, naming the device, its parts
    and the fix. `memory` is `{"devices": {name: {part: bytes}}, "how": {part: words}}`, as
    rows keep it in `extra["memory"]`."""
    devices = memory.get("devices") or {}
    if budget is None or not devices:
        return
    device, parts = max(devices.items(), key=lambda item: needed_bytes(item[1]))
    needed = needed_bytes(parts)
    if needed <= budget:
        return
    listed = ", ".join(
        f"{words} {parts[name] / MIB:.1f}"
        for name, words in PARTS.items()
        if known(parts.get(name))
    )
    unknown = [words for name, words in PARTS.items() if not known(parts.get(name))]
    left_out = f"; {' and '.join(unknown)} not known" if unknown else ""
    raise MemoryBudgetExceeded(
        f"{device} needs {needed / MIB:.1f} MiB ({listed} MiB{left_out}), over the "
        f"memory_budget of {budget / MIB:.1f} MiB per device; {hint}, or raise memory_budget",
        {"refused": {"memory": memory, "state_bytes": state_bytes(memory), **(extra or {})}},
    )


def replica_memory(
    device_names: Any,
    params: int,
    trainable: int,
    optimizer: int,
    activations: float,
    activations_how: str,
) -> dict[str, Any]:
    """Every replica holds the whole model: the same parts on each device."""
    parts = {
        "params_bytes": params,
        "grads_bytes": trainable,
        "optimizer_bytes": optimizer,
        "activations_bytes": activations,
    }
    return {
        "devices": {name: dict(parts) for name in device_names},
        "how": {
            "params_bytes": "measured: the model's variables on each replica",
            "grads_bytes": "modelled: one gradient per trainable parameter",
            "optimizer_bytes": "measured: the optimizer's variables on each replica",
            "activations_bytes": activations_how,
        },
    }
