"""Split a Keras model that is a chain of layers into stages, each living on its own device.

Each stage is rebuilt from its layers' configs under `tf.device`, so its variables (and, built
there too, its optimizer's slots) really live on the stage's device; the trained weights are then
copied in. Nothing silently stays on the device the original model was built on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

from ...errors import GpkError
from ...pipeline.partition import check_splittable, sizes_from_boundaries, solve
from .budget import variable_bytes


@dataclass
class Stage:
    """One contiguous slice of the model on one device, with its own optimizer."""

    index: int
    device: str
    model: keras.Sequential
    optimizer: keras.optimizers.Optimizer
    layer_names: tuple[str, ...]

    @property
    def variables(self) -> list:
        return self.model.trainable_variables

    @property
    def parameter_bytes(self) -> int:
        return variable_bytes(self.model.weights)

    @property
    def optimizer_bytes(self) -> int:
        return variable_bytes(self.optimizer.variables)


def chain_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """The model's layers in order, checked to form a chain (each feeds only the next).

    Checked by running: the layers applied one after another must give the model's own output.
    A model with a branch or skip connection between layers fails this and gets a clear error.
    """
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    if not model.inputs or len(model.inputs) != 1 or len(model.outputs) != 1:
        raise GpkError(
            "strategy='model' needs a model with one input and one output; "
            "use strategy='data' for this model"
        )
    probe = _probe_input(model)
    try:
        chained = probe
        for layer in layers:
            chained = layer(chained, training=False)
        same = np.allclose(np.asarray(chained), np.asarray(model(probe, training=False)), atol=1e-5)
    except Exception:  # noqa: BLE001 - a shape or type mismatch means the layers branch
        same = False
    if not same:
        raise GpkError(
            f"the model {model.name!r} is not a chain of layers (a skip connection or branch "
            "crosses between layers), so it cannot be cut into stages; wrap each residual block "
            "in one layer, or use strategy='data'"
        )
    return layers


def _probe_input(model: keras.Model, batch: int = 2) -> tf.Tensor:
    spec = model.inputs[0]
    shape = (batch, *[d or 1 for d in spec.shape[1:]])
    if "int" in str(spec.dtype):
        return tf.zeros(shape, dtype=spec.dtype)
    return tf.random.stateless_uniform(shape, seed=(1, 2), dtype=spec.dtype)


def stage_sizes(
    layers: list[keras.layers.Layer], stages: int, balance, sample: tf.Tensor
) -> list[int]:
    """How many consecutive layers each stage gets: balanced by parameters, time, or given."""
    check_splittable(len(layers), stages)
    if isinstance(balance, list | tuple):
        return sizes_from_boundaries(list(balance), len(layers), stages)
    if balance == "params":
        costs = [max(layer.count_params(), 1) for layer in layers]
    elif balance == "time":
        costs = layer_times(layers, sample)
    else:
        raise GpkError(
            f"balance={balance!r} is not known; use 'params', 'time' or the layer indices (from 0) "
            "where stages 1..K-1 start"
        )
    return solve(costs, stages)


def layer_times(
    layers: list[keras.layers.Layer], sample: tf.Tensor, repeats: int = 3
) -> list[float]:
    """Each layer's forward + backward time on `sample`, the best of a few tries (once per run)."""
    times = []
    x = sample
    for layer in layers:
        best = float("inf")
        for _ in range(repeats + 1):  # the first call traces and builds
            start = time.perf_counter()
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, training=True)
            grads = tape.gradient(y, [x, *layer.trainable_variables])
            _ = [g.numpy() for g in grads[:1] if g is not None]
            best = min(best, time.perf_counter() - start)
        times.append(best)
        x = tf.stop_gradient(y)
    return times


def build_stages(
    model: keras.Model, layers: list[keras.layers.Layer], sizes: list[int], devices: tuple[str, ...]
) -> list[Stage]:
    """Rebuild each slice of layers on its device, copy the weights, give it its own optimizer."""
    stages = []
    start = 0
    for index, (size, device) in enumerate(zip(sizes, devices, strict=True)):
        chunk = layers[start : start + size]
        with tf.device(device):
            inputs = keras.Input(tuple(chunk[0].input.shape[1:]), dtype=chunk[0].input.dtype)
            copies = [type(layer).from_config(layer.get_config()) for layer in chunk]
            stage_model = keras.Sequential([inputs, *copies], name=f"stage_{index}")
            for copy, original in zip(copies, chunk, strict=True):
                copy.set_weights(original.get_weights())
            optimizer = type(model.optimizer).from_config(model.optimizer.get_config())
            optimizer.build(stage_model.trainable_variables)
        stages.append(
            Stage(index, device, stage_model, optimizer, tuple(layer.name for layer in chunk))
        )
        start += size
    return stages


def variable_devices(stage: Stage) -> set[str]:
    """Where the stage's variables and optimizer slots really are (for tests and the table)."""
    found = {v.value.device for v in stage.model.weights}
    found |= {v.value.device for v in stage.optimizer.variables}
    return found
