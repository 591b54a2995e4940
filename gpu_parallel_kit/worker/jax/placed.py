"""What JAX placed on each device: bytes per device, a variable's shard shape and mesh axes,
and the axes of the optimizer slots built from a weight. Read from the arrays' own shardings, so
a layout asked for and not applied shows as what it is.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from .device_setup import device_names


def placed_bytes(variables: list[Any]) -> dict[str, int]:
    """Bytes each device holds of `variables`, from the shards actually placed on it."""
    held: dict[str, int] = {}
    for variable in variables:
        value = variable.value
        for shard in getattr(value, "addressable_shards", ()):
            name = device_names([shard.device])[0]
            held[name] = held.get(name, 0) + int(shard.data.nbytes)
    return held


def shard_shape(model: keras.Model, path: str) -> list[int]:
    """The shape of one device's piece of the variable at `path`."""
    for variable in model.weights:
        if variable.path == path:
            shards = getattr(variable.value, "addressable_shards", ())
            if shards:
                return [int(d) for d in shards[0].data.shape]
            return [int(d) for d in variable.shape]
    return []


def placed_axes(model: keras.Model, path: str) -> list[str]:
    """The mesh axes the weight at `path` was actually placed on, "" for a replicated one."""
    weight = next((v for v in model.weights if v.path == path), None)
    return [] if weight is None else [a or "" for a in _spec(weight, len(weight.shape))]


def slot_axes(model: keras.Model, path: str) -> list[list[str]]:
    """The mesh axes of each optimizer slot built from the weight at `path` (Keras names a slot
    "<optimizer>/<path with _ for />_<slot>" and gives it the weight's shape), "" for a
    replicated dimension."""
    weight = next((v for v in model.weights if v.path == path), None)
    optimizer = getattr(model, "optimizer", None)
    if weight is None or optimizer is None:
        return []
    stem = path.replace("/", "_") + "_"
    return [
        [a or "" for a in _spec(v, len(weight.shape))]
        for v in optimizer.variables
        if v.path.partition("/")[2].startswith(stem) and tuple(v.shape) == tuple(weight.shape)
    ]


def _spec(variable: Any, rank: int) -> tuple[str | None, ...]:
    sharding = getattr(variable.value, "sharding", None)
    spec = tuple(getattr(sharding, "spec", ()))
    return (spec + (None,) * rank)[:rank]


def nbytes(variable: Any) -> int:
    return int(np.prod(variable.shape, dtype=np.int64)) * np.dtype(variable.dtype).itemsize
