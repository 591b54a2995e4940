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
import numpy as np
import tensorflow as tf

from ....errors import GpkError
from ....pipeline.graph import Call, LayerGraph, StageCut, cut_positions, positions_from_names
from ....pipeline.partition import check_splittable, sizes_from_boundaries
from ..keras_internals import is_functional, run_calls
from .budget import variable_bytes

# What trains a model the pipeline refuses: replicas, or its layers split on JAX.
ELSEWHERE = "strategy='data', or backend='jax' with strategy='tensor'"


@dataclass
class TracedModel:
    """The model's graph, and the symbolic tensor behind each of its tensor names."""

    graph: LayerGraph
    tensors: dict[str, keras.KerasTensor]
    layers: dict[str, keras.layers.Layer]  # by call name
    inputs: Any  # the structure of the model's inputs (a tensor, a list or a dict)
    outputs: Any  # the structure of its outputs
    closed: tuple[str, ...] = ()  # nested subclassed models, each one call: they hide their layers


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


def trace(model: keras.Model) -> TracedModel:
    """The graph of `model`'s layer calls; one sentence for models that have none to show.

    A functional or Sequential model called inside another (a keras-hub backbone, a
    `keras.Model` used as a block) is opened: its own layer calls join the graph, named
    "backbone/transformer_layer_0", so a pipeline can be cut between them. A layer or a
    subclassed model with its own `call()` stays one unit (`TracedModel.closed` names the
    models among them).
    """
    if isinstance(model, keras.Sequential):
        return _trace_sequential(model)
    if getattr(model, "inputs", None) is None:
        raise GpkError(
            f"the model {model.name!r} is a subclassed keras.Model, whose call() hides its graph "
            "of layers, so it cannot be cut into stages; use strategy='data', or write the model "
            "with the functional API (keras.Input, then layers called on tensors)"
        )
    calls = _Calls()
    traced = keras.models.clone_model(
        model, clone_function=lambda layer: layer, call_function=calls.recorder("")
    )
    names: dict[int, str] = {}
    sources = []
    for tensor in keras.tree.flatten(traced.input):
        names[id(tensor)] = tensor.name
        sources.append(tensor.name)
    return _assemble(calls, names, sources, traced.input, traced.output)


def _trace_sequential(model: keras.Sequential) -> TracedModel:
    """A Sequential is a chain: its layers called one after another on a fresh input."""
    if not model.inputs:
        raise GpkError(f"the Sequential model {model.name!r} was never built; call it once")
    spec = model.inputs[0]
    inputs = keras.Input(tuple(spec.shape[1:]), dtype=spec.dtype, name="inputs")
    calls = _Calls()
    x = calls.chain(model, inputs, "")
    return _assemble(calls, {id(inputs): "inputs"}, ["inputs"], inputs, x)


class _Calls:
    """Every layer call of a model, in order, with nested models opened up."""

    def __init__(self) -> None:
        self.made: list[tuple[str, keras.layers.Layer, list, list]] = []
        self.closed: list[str] = []  # subclassed models kept whole: their call() hides layers

    def recorder(self, prefix: str):
        def record(layer: keras.layers.Layer, *args: Any, **kwargs: Any) -> Any:
            name = f"{prefix}{layer.name}"
            if is_functional(layer):
                return run_calls(layer, args[0], self.recorder(f"{name}/"))
            if isinstance(layer, keras.Sequential) and layer.inputs:
                return self.chain(layer, args[0], f"{name}/")
            if isinstance(layer, keras.Model):
                self.closed.append(name)
            outputs = layer(*args, **kwargs)
            found = [
                t for t in keras.tree.flatten((args, kwargs)) if isinstance(t, keras.KerasTensor)
            ]
            self.made.append((name, layer, found, keras.tree.flatten(outputs)))
            return outputs

        return record

    def chain(self, model: keras.Sequential, x: Any, prefix: str) -> Any:
        record = self.recorder(prefix)
        for layer in model.layers:
            x = record(layer, x)
        return x


def _assemble(calls: _Calls, names: dict[int, str], sources: list[str], inputs, outputs):
    tensors: dict[str, keras.KerasTensor] = {}
    for tensor in keras.tree.flatten(inputs):
        tensors[names[id(tensor)]] = tensor
    graph_calls, layers, seen = [], {}, set()
    for name, layer, found, made in calls.made:
        if name in seen:
            raise GpkError(
                f"layer {name!r} is called at several places in the model (a shared layer); "
                "its calls cannot be put on different devices, so the model cannot be cut into "
                f"stages; give each call a layer of its own, or use {ELSEWHERE}"
            )
        seen.add(name)
        made_names = [name if len(made) == 1 else f"{name}:{k}" for k in range(len(made))]
        for tensor, made_name in zip(made, made_names, strict=True):
            names[id(tensor)] = made_name
            tensors[made_name] = tensor
        read = tuple(dict.fromkeys(names[id(t)] for t in found))
        graph_calls.append(Call(name, read, tuple(made_names)))
        layers[name] = layer
    sinks = tuple(names[id(t)] for t in keras.tree.flatten(outputs))
    graph = LayerGraph.ordered(graph_calls, tuple(sources), sinks)
    return TracedModel(graph, tensors, layers, inputs, outputs, tuple(calls.closed))


def bytes_per_sample(tensor: keras.KerasTensor) -> int:
    """From the symbolic shape; an unknown length (None past the batch) counts as 1."""
    size = math.prod(d or 1 for d in tensor.shape[1:])
    return size * tf.as_dtype(tensor.dtype).size


def stage_starts(
    traced: TracedModel, devices: int, chunks: int, balance: Any, sample: Any
) -> list[int]:
    """Where stages 1..K*v-1 begin (K devices, v chunks each), as positions in the graph's
    order of calls."""
    graph = traced.graph
    calls = len(graph.calls)
    stages = devices * chunks
    if chunks > 1 and calls < stages:
        raise GpkError(
            f"the model has {calls} layers, fewer than the {stages} stages of {devices} devices "
            f"x virtual_stages={chunks}; use virtual_stages={max(calls // devices, 1)} or fewer, "
            "or fewer devices"
        )
    if calls < stages and traced.closed:
        hidden = ", ".join(repr(name) for name in traced.closed)
        raise GpkError(
            f"the model has {calls} layers, fewer than {stages} stages, because {hidden} is a "
            "subclassed keras.Model whose call() hides its layers, so it counts as one and cannot "
            f"be cut inside; use devices={calls} or fewer, or build it with the functional API"
        )
    check_splittable(calls, stages)
    if isinstance(balance, list | tuple) and balance and isinstance(balance[0], str):
        return positions_from_names(graph, list(balance), stages)
    if isinstance(balance, list | tuple):
        sizes = sizes_from_boundaries(list(balance), calls, stages)
        return [sum(sizes[:k]) for k in range(1, stages)]
    if balance == "params":
        costs = [max(_parameters(traced.layers[c.name]), 1) for c in graph.calls]
    elif balance == "time":
        costs = call_times(traced, sample)
    else:
        raise GpkError(
            f"balance={balance!r} is not known; use 'params', 'time', the layer indices (from 0) "
            "or the layer names where stages 1..K-1 start"
        )
    crossing = [
        sum(bytes_per_sample(traced.tensors[t]) for t in graph.crossing(p)) for p in range(calls)
    ]
    return cut_positions(costs, crossing, stages)


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


def _parameters(layer: Any) -> int:
    """A layer's parameter count; 0 for a Keras operation in a functional graph (`ops.expand_dims`
    becomes a node with no weights and no `count_params`)."""
    return int(sum(np.prod(w.shape) for w in getattr(layer, "weights", [])))
