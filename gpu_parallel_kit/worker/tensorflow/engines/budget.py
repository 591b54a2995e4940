"""What a TensorFlow engine's devices hold, part by part, for the memory budget
(`worker/budget.py`) and the rows' memory columns."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import keras
import tensorflow as tf

from ...budget import MemoryBudgetExceeded, check_budget, replica_memory
from ...layers import read_layers

__all__ = [
    "MemoryBudgetExceeded",
    "check_budget",
    "modelled_activations",
    "replica_memory_of",
    "variable_bytes",
]

ACTIVATIONS_HOW = (
    "modelled: every layer's output for the replica's share of the batch, float32, kept for "
    "the backward"
)
NOT_MODELLED = "not known: modelled when a memory_budget is set (it costs a call of the model)"


def variable_bytes(variables: Iterable) -> int:
    total = 0
    for variable in variables:
        total += (
            int(tf.TensorShape(variable.shape).num_elements() or 0)
            * tf.as_dtype(variable.dtype).size
        )
    return total


def modelled_activations(model: keras.Model, sample: Any, samples: int) -> float:
    """Bytes of every layer's output for `samples` samples, float32, from one call on `sample`
    (one sample of the inputs); NaN for a model that cannot be read that way."""
    try:
        layers = read_layers(model, sample)
    except Exception:  # noqa: BLE001 - a model that cannot be read keeps its other parts
        return math.nan
    return float(sum(layer.out_elements or 0 for layer in layers) * samples * 4)


def replica_memory_of(
    model: keras.Model, device_names: Iterable[str], dataset: tf.data.Dataset, samples: int
) -> dict[str, Any]:
    """Each replica's parts: the whole model's variables and optimizer slots, one gradient per
    trainable parameter, and, where a budget asks, its share of the batch's activations."""
    activations, how = math.nan, NOT_MODELLED
    if samples:
        x = next(iter(dataset))[0]
        sample = tf.nest.map_structure(lambda value: value[:1], x)
        activations, how = modelled_activations(model, sample, samples), ACTIVATIONS_HOW
    return replica_memory(
        device_names,
        variable_bytes(model.weights),
        variable_bytes(model.trainable_variables),
        variable_bytes(model.optimizer.variables),
        activations,
        how,
    )
