"""One sample of a model's inputs and labels, as the count takes it: a `(shape, dtype)` pair per
array.

A user gives one sample (an array, or a dict or list of arrays, as `fit` takes a batch of them,
without the batch axis); an experiment gives its data, labels included, so a classifier's loss
is counted on class indices where its labels are. Only shapes and dtypes cross into the
counting child, so a sample of a 2,048-token sequence is a few kilobytes whatever the model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import GpkError
from ..runs.description.nested_arrays import flatten, unflatten, width
from ..runs.description.sources import CountedSample, DataSource, array_structures
from ..runs.description.synthetic_data import synthetic_spec

Spec = Any  # a (shape, dtype) pair, or a dict or list of them


def sample_spec(inputs: Any, what: str = "inputs") -> Spec:
    """`(shape, dtype)` pairs of one sample: an array-like, a `(shape, dtype)` pair, or a dict or
    list of either, e.g. `{"token_ids": np.zeros(2048, "int32"), "padding_mask": ...}`; `what`
    names the keyword in sentences."""
    if inputs is None:
        raise GpkError(
            "inputs= is missing; give one sample of the model's inputs, e.g. "
            "inputs={'token_ids': np.zeros(2048, 'int32'), 'padding_mask': np.ones(2048, 'int32')}"
        )
    if _is_pair(inputs):
        return (tuple(int(d) for d in inputs[0]), str(np.dtype(inputs[1])))
    if isinstance(inputs, np.generic | np.ndarray) and np.ndim(inputs) == 0:
        return _pair(what, np.asarray(inputs))  # one sample of a class index: np.int32(0)
    if isinstance(inputs, dict) and all(_is_pair(v) for v in inputs.values()):
        return {str(k): sample_spec(v, what) for k, v in inputs.items()}
    structure, leaves = flatten(inputs, what)
    pairs = [_pair(label, array) for label, array in leaves]
    spec = unflatten(structure, pairs)
    return list(spec) if structure[0] in ("list", "tuple") else spec


def experiment_sample(data: DataSource, loss: Any = None) -> CountedSample:
    """One sample of an experiment's training data, labels included: its arrays' shapes and
    dtypes without the sample axis, or a built-in set's; `loss` is the experiment's."""
    if data.kind == "synthetic":
        shape = synthetic_spec(data.name)
        inputs = (tuple(shape.input_shape), "int32" if shape.integer_inputs else "float32")
        return CountedSample(inputs, ((), "int32"), loss, given_by="data")  # class indices
    if data.kind != "arrays":
        raise GpkError(
            f"the experiment's data comes from {data.name}, a dataset builder, whose samples "
            "are not known before it runs; call gpk.search(model=..., inputs=one_sample, ...) "
            "with one sample instead"
        )
    x, y = array_structures(data)
    loaded = [np.load(path, mmap_mode="r") for path in data.paths]
    pairs = [(tuple(array.shape[1:]), str(array.dtype)) for array in loaded]
    inputs, labels = _rebuilt(x, pairs[: width(x)]), _rebuilt(y, pairs[width(x) :])
    return CountedSample(inputs, labels, loss, given_by="data")


def _rebuilt(structure: Any, pairs: list[tuple[tuple[int, ...], str]]) -> Spec:
    spec = unflatten(structure, pairs)
    return list(spec) if structure[0] in ("list", "tuple") else spec


def sequence_of(spec: Spec) -> int | None:
    """The sequence length: the first axis of the first input that has one."""
    for shape, _ in _pairs(spec):
        if shape:
            return int(shape[0])
    return None


def describe(spec: Spec) -> str:
    """ "token_ids (2048,) int32, padding_mask (2048,) int32": how a sentence names a sample."""
    if isinstance(spec, dict):
        return ", ".join(f"{k} {tuple(v[0])} {v[1]}" for k, v in spec.items())
    return ", ".join(f"{tuple(shape)} {dtype}" for shape, dtype in _pairs(spec))


def _pairs(spec: Spec) -> list[tuple[tuple[int, ...], str]]:
    if isinstance(spec, dict):
        return [spec[k] for k in spec]
    if isinstance(spec, list):
        return list(spec)
    return [spec]


def _is_pair(value: Any) -> bool:
    """A `(shape, dtype)` pair as the count takes it, e.g. `((2048,), "int32")`."""
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], tuple | list)
        and all(isinstance(d, int) and not isinstance(d, bool) for d in value[0])
        and isinstance(value[1], str | np.dtype | type)
    )


def _pair(label: str, array: np.ndarray) -> tuple[tuple[int, ...], str]:
    if array.dtype.kind not in "biuf":
        raise GpkError(f"{label} has dtype {array.dtype}; give numbers (ints, floats or bools)")
    return tuple(int(d) for d in array.shape), str(array.dtype)
