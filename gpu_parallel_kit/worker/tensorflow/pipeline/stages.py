"""Cut a Keras model's graph of layer calls into stages, each living on its own device.

The graph is read by re-calling the model's own layers on fresh inputs (`clone_model` with the
layers kept and every call recorded), so it is the model's real graph: residual streams, branches,
several inputs and long skips included (pipeline/graph.py says what crosses each cut). Each stage
is a functional sub-model of its calls, its inputs the tensors that cross into it, cloned under
`tf.device` so its variables (and, built there too, its optimizer's slots) really live on the
stage's device; the trained weights are copied back into the user's layers afterwards.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from ....errors import GpkError
from ....pipeline.graph import StageCut
from ...pipeline.layer_graph import (
    ELSEWHERE,
    TracedModel,
    trace,  # noqa: F401 - the engine reads the graph through this module
)
from ...pipeline.layer_graph import stage_starts as shared_starts
from ..engines.budget import variable_bytes


@dataclass
class Stage:
    """One slice of the model's graph on one device, with its own optimizer."""

    index: int
    device: str
    model: keras.Model  # the clone on the device: inputs cut.used, outputs cut.computed
    original: keras.Model  # the same sub-model over the user's own layers
    optimizer: keras.optimizers.Optimizer
    cut: StageCut

    @property
    def layer_names(self) -> tuple[str, ...]:
        return self.cut.calls

    @property
    def variables(self) -> list:
        return self.model.trainable_variables

    @property
    def parameter_bytes(self) -> int:
        return variable_bytes(self.model.weights)

    @property
    def optimizer_bytes(self) -> int:
        return variable_bytes(self.optimizer.variables)

    def forward(self, received: dict[str, tf.Tensor], training: bool) -> dict[str, tf.Tensor]:
        """What the stage sends on: its sub-model's outputs, and what it passes through."""
        outputs = self.model([received[name] for name in self.cut.used], training=training)
        return self.sent(received, keras.tree.flatten(outputs))

    def sent(self, received: dict[str, Any], computed: list[Any]) -> dict[str, Any]:
        """What crosses out of the stage, by name: its sub-model's outputs (`computed`, in
        `cut.computed` order) and the received tensors it passes through."""
        made = dict(zip(self.cut.computed, computed, strict=True))
        return {name: made[name] if name in made else received[name] for name in self.cut.sent}


def bytes_per_sample(tensor: keras.KerasTensor) -> int:
    """From the symbolic shape; an unknown length (None past the batch) counts as 1."""
    size = math.prod(d or 1 for d in tensor.shape[1:])
    return size * tf.as_dtype(tensor.dtype).size


def stage_starts(
    traced: TracedModel, devices: int, chunks: int, balance: Any, sample: Any
) -> list[int]:
    """Where stages 1..K*v-1 begin (K devices, v chunks each), as positions in the graph's
    order of calls (`worker/layer_graph.stage_starts`, timed here for balance="time")."""
    return shared_starts(
        traced, devices, chunks, balance, lambda: call_times(traced, sample), bytes_per_sample
    )


def call_times(traced: TracedModel, sample: Any, repeats: int = 3) -> list[float]:
    """Each call's forward + backward time on real values, the best of a few tries."""
    values = feed(traced, sample)
    times = []
    for call in traced.graph.calls:
        single = keras.Model(
            [traced.tensors[t] for t in call.inputs], [traced.tensors[t] for t in call.outputs]
        )
        args = [values[t] for t in call.inputs]
        best = float("inf")
        for _ in range(repeats + 1):  # the first call traces and builds
            start = time.perf_counter()
            with tf.GradientTape() as tape:
                for arg in args:
                    if arg.dtype.is_floating:
                        tape.watch(arg)
                out = keras.tree.flatten(single(args, training=True))
            grads = (
                tape.gradient(out, single.trainable_variables) if single.trainable_variables else []
            )
            _ = [g.numpy() for g in grads[:1] if g is not None]
            best = min(best, time.perf_counter() - start)
        times.append(best)
        values.update(dict(zip(call.outputs, [tf.stop_gradient(o) for o in out], strict=True)))
    return times


def feed(traced: TracedModel, x: Any) -> dict[str, tf.Tensor]:
    """The model's input tensors by name, from a batch of `x` (a tensor, a tuple or a dict)."""
    given = tf.nest.flatten(x)
    sources = traced.graph.sources
    if len(given) != len(sources):
        raise GpkError(
            f"the data gives {len(given)} input tensor(s) but the model takes {len(sources)} "
            f"({', '.join(sources)}); give x in the structure of the model's inputs"
        )
    return dict(zip(sources, given, strict=True))


def build_stages(
    model: keras.Model, traced: TracedModel, starts: list[int], devices: tuple[str, ...]
) -> list[Stage]:
    """Clone each slice of the graph on its device, copy the weights, give it an optimizer."""
    bounds = [0, *starts, len(traced.graph.calls)]
    stages = []
    for index, device in enumerate(devices):
        cut = traced.graph.stage(bounds[index], bounds[index + 1])
        original = keras.Model(
            [traced.tensors[t] for t in cut.used],
            [traced.tensors[t] for t in cut.computed],
            name=f"stage_{index}_of_{model.name}",
        )
        with tf.device(device):
            clone = _rebuilt(original, cut.calls, traced)
            clone.set_weights(original.get_weights())
            optimizer = type(model.optimizer).from_config(model.optimizer.get_config())
            optimizer.build(clone.trainable_variables)
        stages.append(Stage(index, device, clone, original, optimizer, cut))
    return stages


def _rebuilt(original: keras.Model, calls: tuple[str, ...], traced: TracedModel) -> keras.Model:
    """The stage rebuilt from its layers' configs (on the device in scope); a layer whose
    config does not rebuild it is named in one sentence."""
    try:
        return keras.models.clone_model(original)
    except Exception:  # noqa: BLE001 - a layer's config is the likely cause: named below
        for name in calls:
            layer = traced.layers[name]
            try:
                type(layer).from_config(layer.get_config())
            except Exception as error:  # noqa: BLE001 - any failure here is the layer's config
                raise GpkError(
                    f"layer {name!r} ({type(layer).__name__}) cannot be rebuilt from its "
                    f"get_config() on its stage's device ({type(error).__name__} there), so the "
                    "model cannot be cut into stages; give its class a get_config() that returns "
                    f"its constructor's arguments, or use {ELSEWHERE}"
                ) from None
        raise


def copy_back(stages: list[Stage]) -> None:
    """The user's model ends with the trained weights, so saving it saves the training."""
    for stage in stages:
        stage.original.set_weights(stage.model.get_weights())


def describe(stage: Stage, traced: TracedModel) -> dict[str, Any]:
    """What `r.stages` shows of a stage's cut: its first and last layers, and what crosses in."""
    return {
        "first_layer": stage.cut.calls[0],
        "last_layer": stage.cut.calls[-1],
        "receives": [
            {
                "tensor": name,
                "shape": [d for d in traced.tensors[name].shape[1:]],
                "bytes_per_sample": bytes_per_sample(traced.tensors[name]),
            }
            for name in stage.cut.received
        ],
    }


def variable_devices(stage: Stage) -> set[str]:
    """Where the stage's variables and optimizer slots really are (for tests and the table)."""
    found = {v.value.device for v in stage.model.weights}
    found |= {v.value.device for v in stage.optimizer.variables}
    return found
