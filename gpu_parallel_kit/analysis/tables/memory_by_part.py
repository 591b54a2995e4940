"""A run's memory per device, split into parameters, gradients, optimizer state and activations.

Each part is measured where the backend could say and modelled where it could not, from the
row's `extra["memory"]` (JAX runs, TensorFlow pipeline and replica runs). Rows logged before
replica runs recorded it take the state per device less the trainable parameters as the
optimizer's (non-trainable weights fall there), activations not known. The split shows which
part a strategy divides, which one total per device cannot. Pure: plain results in, plain
numbers out. Where each part comes from: `docs/memory.md`, "The four parts".
"""

from __future__ import annotations

import math
from typing import Any

from ...runs.results.run_result import RunResult

COMPONENTS: tuple[str, ...] = (
    "params_bytes",
    "grads_bytes",
    "optimizer_bytes",
    "activations_bytes",
)
NOT_KNOWN = math.nan


def device_components(result: RunResult) -> dict[str, dict[str, float]]:
    """Per device name, the bytes of each component ({} when the row recorded no memory)."""
    extra = result.extra
    recorded = extra.get("memory")
    if recorded and recorded.get("devices"):
        return {
            device: {c: float(parts.get(c, NOT_KNOWN)) for c in COMPONENTS}
            for device, parts in recorded["devices"].items()
        }
    stages = extra.get("stages") or []
    if stages and all("device" in s and "parameter_bytes" in s for s in stages):
        held: dict[str, dict[str, float]] = {}
        for stage in stages:
            parts = held.setdefault(stage["device"], dict.fromkeys(COMPONENTS, 0.0))
            parts["params_bytes"] += stage["parameter_bytes"]
            parts["grads_bytes"] += stage["parameter_bytes"]
            parts["optimizer_bytes"] += stage.get("optimizer_bytes") or 0
            parts["activations_bytes"] += stage.get("activation_bytes_held") or 0
        return held
    state, parameters = extra.get("state_bytes") or {}, extra.get("parameter_bytes")
    if not state or parameters is None:
        return {}
    return {
        device: {
            "params_bytes": float(parameters),
            "grads_bytes": float(parameters),
            "optimizer_bytes": float(max(total - parameters, 0)),
            "activations_bytes": NOT_KNOWN,
        }
        for device, total in state.items()
    }


def fullest_components(result: RunResult) -> dict[str, float]:
    """The components of the device that holds the most (the table's columns); NaN when the
    row recorded no memory."""
    per_device = device_components(result)
    if not per_device:
        return dict.fromkeys(COMPONENTS, NOT_KNOWN)
    fullest = max(per_device.values(), key=_total)
    return dict(fullest)


def component_sources(result: RunResult) -> dict[str, str]:
    """How each component was obtained, for a reader of the row: measured or modelled, and how."""
    recorded = result.extra.get("memory")
    if recorded and recorded.get("how"):
        return dict(recorded["how"])
    if result.extra.get("stages"):
        return {
            "params_bytes": "measured: the stage's variables",
            "grads_bytes": "modelled: one gradient per parameter",
            "optimizer_bytes": "measured: the stage's optimizer slots",
            "activations_bytes": "measured: the activations the schedule held at its peak",
        }
    return {
        "params_bytes": "measured: the trainable variables",
        "grads_bytes": "modelled: one gradient per parameter",
        "optimizer_bytes": "modelled: the state beyond the trainable parameters",
        "activations_bytes": "not known: the backend reports the device's peak only",
    }


def _total(parts: dict[str, Any]) -> float:
    return sum(v for v in parts.values() if isinstance(v, int | float) and not math.isnan(v))
