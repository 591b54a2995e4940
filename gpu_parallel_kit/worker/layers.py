"""A built Keras model read as `sharding.LayerInfo`s: its layers in call order, their variables
and, from one call on one sample, how many activation elements each layer takes and gives per
sample.

Backend-free Keras, so both backends read models the same way: JAX derives tensor layouts and
traffic from it (`jax/layout.py`, `sharding/`), and every engine models the activations a device
keeps for the backward, which the memory budget counts (`budget.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import keras
import numpy as np

from ..sharding.layout import LayerInfo, VariableInfo

ELEMENTWISE = (
    keras.layers.Activation,
    keras.layers.Dropout,
    keras.layers.ReLU,
    keras.layers.LeakyReLU,
    keras.layers.ELU,
    keras.layers.GaussianNoise,
    keras.layers.GaussianDropout,
    keras.layers.AlphaDropout,
    keras.layers.Identity,
)
# Layers whose kernel is (…, input channels, output channels): a pair splits its channels.
CONVOLUTIONS = (keras.layers.Conv1D, keras.layers.Conv2D, keras.layers.Conv3D)
# Layers that act on each channel alone (a depthwise convolution of one filter a channel too).
PER_CHANNEL = (
    keras.layers.MaxPooling1D,
    keras.layers.MaxPooling2D,
    keras.layers.MaxPooling3D,
    keras.layers.AveragePooling1D,
    keras.layers.AveragePooling2D,
    keras.layers.AveragePooling3D,
    keras.layers.BatchNormalization,
)


def read_layers(model: keras.Model, sample: Any) -> list[LayerInfo]:
    """The model's layers in call order (nested models opened up), with their activation sizes
    per sample measured on `sample` (one sample of the inputs)."""
    layers = list(_walk(model))
    sizes = _activation_sizes(model, layers, sample)
    return [_info(layer, *sizes.get(id(layer), (None, None))) for layer in layers]


def read_weights(model: keras.Model) -> list[LayerInfo]:
    """The model's layers in call order (nested models opened up) with their variables, the
    model not called: a model built with its weights deferred (`keras.StatelessScope`) reads
    as well. Their activation sizes are not known (None)."""
    return [_info(layer, None, None) for layer in _walk(model)]


def _walk(layer: keras.layers.Layer) -> Iterator[keras.layers.Layer]:
    for child in getattr(layer, "layers", []):
        if isinstance(child, keras.Model) or (
            isinstance(child, keras.layers.Layer) and _is_container(child)
        ):
            yield from _walk(child)
        elif not isinstance(child, keras.layers.InputLayer):
            yield child


def _is_container(layer: keras.layers.Layer) -> bool:
    return isinstance(layer, keras.Sequential | keras.Model)


def _kind(layer: keras.layers.Layer) -> str:
    if isinstance(layer, keras.layers.MultiHeadAttention):
        return "attention"
    if isinstance(layer, keras.layers.Dense):
        return "dense"
    if isinstance(layer, keras.layers.EinsumDense):
        return "einsum_dense"
    if isinstance(layer, keras.layers.Embedding):
        return "embedding"
    if isinstance(layer, ELEMENTWISE):
        return "elementwise"
    if isinstance(layer, CONVOLUTIONS) and getattr(layer, "groups", 1) == 1:
        return "convolution"
    if isinstance(layer, PER_CHANNEL) or _one_filter_a_channel(layer):
        return "per_channel"
    return "other"


def _one_filter_a_channel(layer: keras.layers.Layer) -> bool:
    depthwise = (keras.layers.DepthwiseConv1D, keras.layers.DepthwiseConv2D)
    return isinstance(layer, depthwise) and getattr(layer, "depth_multiplier", 0) == 1


def _info(
    layer: keras.layers.Layer, in_elements: int | None, out_elements: int | None
) -> LayerInfo:
    prefix = f"{layer.path}/" if getattr(layer, "path", None) else ""
    trainable = {id(v) for v in layer.trainable_variables}
    variables = tuple(
        VariableInfo(
            path=v.path,
            shape=tuple(int(d) for d in v.shape),
            role=v.path[len(prefix) :] if v.path.startswith(prefix) else v.name,
            trainable=id(v) in trainable,
            itemsize=np.dtype(v.dtype).itemsize,
        )
        for v in layer.weights
    )
    heads = getattr(layer, "num_heads", None) if _kind(layer) == "attention" else None
    return LayerInfo(layer.name, _kind(layer), variables, heads, in_elements, out_elements)


def _activation_sizes(
    model: keras.Model, layers: list[keras.layers.Layer], sample: Any
) -> dict[int, tuple[int | None, int | None]]:
    """Per layer, the elements per sample of its first input and of its output, from one call.

    Each layer's `call` is wrapped for that one call only (and restored), so any model (Sequential,
    functional or subclassed) reports the same way.
    """
    sizes: dict[int, tuple[int | None, int | None]] = {}

    def wrapped(layer: keras.layers.Layer, call: Callable[..., Any]) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            output = call(*args, **kwargs)
            first = args[0] if args else next(iter(kwargs.values()), None)
            sizes[id(layer)] = (_per_sample(first), _per_sample(output))
            return output

        return record

    own = {id(layer): layer.__dict__.get("call") for layer in layers}
    for layer in layers:
        layer.__dict__["call"] = wrapped(layer, layer.call)
    try:
        model(sample, training=False)
    finally:
        for layer in layers:
            if own[id(layer)] is None:
                del layer.__dict__["call"]  # the class's own method shows through again
            else:
                layer.__dict__["call"] = own[id(layer)]
    return sizes


def _per_sample(value: object) -> int | None:
    shape = getattr(value, "shape", None)
    if shape is None or len(shape) == 0:
        return None
    return int(math.prod(int(d) for d in shape[1:]))
