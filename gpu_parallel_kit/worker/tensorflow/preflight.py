"""Checks of the model against the data, in the worker's first second, before any training.

Keras finds these mistakes too, but only inside the first traced step and in its own words
("Arguments `target` and `output` must have the same rank"). Here each is one sentence naming
the value and the fix: a loss that expects class indices given one-hot rows or the other way
round, an output layer narrower than the labels need, an input shape that does not fit `x`.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ...errors import GpkError
from ..keras_internals import compile_config

_SPARSE = ("sparse_categorical_crossentropy", "sparsecategoricalcrossentropy")
_ONE_HOT = ("categorical_crossentropy", "categoricalcrossentropy")


def check_inputs(model: keras.Model, element_spec: Any) -> None:
    """A model with declared inputs must take samples shaped like `x`'s."""
    declared = getattr(model, "inputs", None) if model.built else None
    if not declared:
        return  # built from the data itself (subclassed, deferred Sequential): nothing to match
    given = tf.nest.flatten(element_spec[0])
    if len(given) != len(declared):
        return  # a structure mismatch is Keras's to explain; counts differ only for odd models
    for expected, spec in zip(declared, given, strict=True):
        want, have = tuple(expected.shape[1:]), tuple(spec.shape[1:])
        if len(want) != len(have) or any(
            w is not None and h is not None and w != h for w, h in zip(want, have, strict=True)
        ):
            raise GpkError(
                f"the model takes inputs of shape {_shape(want)} per sample but x has samples of "
                f"shape {_shape(have)}; reshape x, or change the model's input shape "
                f"(keras.Input({_shape(have)}))"
            )


def check_targets(model: keras.Model, element_spec: Any, largest_label: int | None) -> None:
    """A single-output classifier's loss, output width and labels must agree."""
    loss = _loss_name(compile_config(model).get("loss", getattr(model, "loss", None)))
    outputs = getattr(model, "outputs", None)
    targets = element_spec[1] if isinstance(element_spec, tuple) else None
    if loss is None or not isinstance(targets, tf.TensorSpec):
        return
    units = _output_units(model, outputs, element_spec)
    label_shape = tuple(targets.shape[1:])
    integer_labels = targets.dtype.is_integer or label_shape in ((), (1,))
    if loss in _SPARSE:
        if not targets.dtype.is_integer and label_shape not in ((), (1,)):
            raise GpkError(
                f"loss='sparse_categorical_crossentropy' expects integer class labels, but y "
                f"holds rows of {label_shape[-1]} values (one-hot); use "
                "loss='categorical_crossentropy', or pass the class indices (y.argmax(axis=1))"
            )
        if units is not None and largest_label is not None and largest_label >= units:
            raise GpkError(
                f"the labels go up to {largest_label} but the model's output has {units} units; "
                f"give the last layer {largest_label + 1} units, one per class"
            )
    elif loss in _ONE_HOT:
        if integer_labels:
            width = f" of width {units}" if units else ""
            raise GpkError(
                f"loss='categorical_crossentropy' expects one-hot targets{width}, but y holds "
                "integer class labels; use loss='sparse_categorical_crossentropy', or one-hot "
                "encode y (keras.utils.to_categorical)"
            )
        if units is not None and label_shape and label_shape[-1] not in (None, units):
            raise GpkError(
                f"y holds one-hot rows of {label_shape[-1]} classes but the model's output has "
                f"{units} units; give the last layer {label_shape[-1]} units"
            )


def largest_label(y: Any) -> int | None:
    """The largest integer label, when the labels are integers held in an array."""
    values = np.asarray(y)
    if values.size == 0 or not np.issubdtype(values.dtype, np.integer):
        return None
    return int(values.max())


def _loss_name(loss: Any) -> str | None:
    if isinstance(loss, str):
        return loss.lower()
    if isinstance(loss, keras.losses.Loss):
        return type(loss).__name__.lower()
    if isinstance(loss, dict) and isinstance(loss.get("class_name"), str):
        return loss["class_name"].lower()
    return None


def _output_units(model: keras.Model, outputs: Any, element_spec: Any) -> int | None:
    """The width of the model's one output; a model without declared outputs (subclassed) is
    asked by a call on zeros shaped like one sample."""
    if outputs is None:
        sample = tf.nest.map_structure(
            lambda spec: tf.zeros([1, *[d or 1 for d in spec.shape[1:]]], dtype=spec.dtype),
            element_spec[0],
        )
        outputs = tf.nest.flatten(model(sample, training=False))
    if len(outputs) != 1:
        return None
    last = outputs[0].shape[-1]
    return int(last) if last is not None else None


def _shape(dims: tuple) -> str:
    text = ", ".join("None" if d is None else str(d) for d in dims)
    return f"({text},)" if len(dims) == 1 else f"({text})"
