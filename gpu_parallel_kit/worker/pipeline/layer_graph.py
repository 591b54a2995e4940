"""A Keras model read as the graph of its layer calls, and the positions where it is cut.

The graph is read by re-calling the model's own layers on fresh inputs (`clone_model` with the
layers kept and every call recorded), so it is the model's real graph: residual streams, branches,
several inputs and long skips included (`pipeline/graph.py` says what crosses each cut). Nested
functional models (a keras-hub backbone) are opened; subclassed ones stay one call. Backend-free
Keras: both backends' pipelines read their stages here (`worker/tensorflow/pipeline/stages.py`,
`worker/jax/pipeline/`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from ...errors import GpkError
from ...pipeline.graph import Call, LayerGraph, cut_positions, positions_from_names
from ...pipeline.partition import check_splittable, sizes_from_boundaries
from ..keras_internals import is_functional, run_calls
from .stage_failure import ELSEWHERE  # what trains a model the pipeline refuses


@dataclass
class TracedModel:
    """The model's graph, and the symbolic tensor behind each of its tensor names."""

    graph: LayerGraph
    tensors: dict[str, keras.KerasTensor]
    layers: dict[str, keras.layers.Layer]  # by call name
    inputs: Any  # the structure of the model's inputs (a tensor, a list or a dict)
    outputs: Any  # the structure of its outputs
    closed: tuple[str, ...] = ()  # nested subclassed models, each one call: they hide their layers


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


def stage_starts(
    traced: TracedModel,
    devices: int,
    chunks: int,
    balance: Any,
    call_times: Callable[[], list[float]],
    size: Callable[[keras.KerasTensor], int],
) -> list[int]:
    """Where stages 1..K*v-1 begin (K devices, v chunks each), as positions in the graph's
    order of calls; `call_times` measures each call (balance="time"), `size` gives a tensor's
    bytes per sample (what crosses a cut)."""
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
        costs = call_times()
    else:
        raise GpkError(
            f"balance={balance!r} is not known; use 'params', 'time', the layer indices (from 0) "
            "or the layer names where stages 1..K-1 start"
        )
    crossing = [sum(size(traced.tensors[t]) for t in graph.crossing(p)) for p in range(calls)]
    return cut_positions(costs, crossing, stages)


def _parameters(layer: Any) -> int:
    """A layer's parameter count; 0 for a Keras operation in a functional graph (`ops.expand_dims`
    becomes a node with no weights and no `count_params`)."""
    return int(sum(np.prod(w.shape) for w in getattr(layer, "weights", [])))
