"""Several inputs or outputs as arrays: a dict (by input name), list or tuple of arrays, as
`model.fit` takes them, flattened to files and back.

The caller writes each array to its own memory-mapped file; the worker rebuilds the structure
`model.fit` takes, such as a keras-hub backbone's `{"token_ids": ..., "padding_mask": ...}`. A
structure crosses into the worker inside the run's `DataSource` as a small picklable tuple:

    ("array",)                      one array
    ("dict", ("padding_mask", "token_ids"))
    ("tuple", 2) or ("list", 2)

One level deep, as `fit` takes inputs: a dict of dicts is refused in one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ...errors import GpkError

Structure = tuple[Any, ...]
SINGLE: Structure = ("array",)


class Samples(NamedTuple):
    """A data set's inputs and targets, each one array or a dict, list or tuple of them."""

    x: Any  # the inputs, as `model.fit` takes them
    y: Any  # the targets, one per input sample


class Structures(NamedTuple):
    """How an arrays source's inputs and targets are laid out (see the module)."""

    x: Structure
    y: Structure


def flatten(value: Any, what: str) -> tuple[Structure, list[tuple[str, np.ndarray]]]:
    """(structure, [(label, array)]) of `value`; a label names an array in errors ("x['ids']").

    >>> flatten({"b": [1, 2], "a": [3, 4]}, "x")[0]
    ('dict', ('a', 'b'))
    """
    if isinstance(value, dict):
        if not value:
            raise GpkError(f"{what} is an empty dict; give one array per model input")
        keys = tuple(sorted(value))
        for key in keys:
            if not isinstance(key, str):
                raise GpkError(f"{what} has the key {key!r}; key the arrays by input name (text)")
        return ("dict", keys), [(f"{what}[{k!r}]", _leaf(value[k], f"{what}[{k!r}]")) for k in keys]
    if isinstance(value, list | tuple) and not _one_array(value):
        if not value:
            raise GpkError(f"{what} is an empty {type(value).__name__}; give at least one array")
        kind = type(value).__name__
        leaves = [(f"{what}[{i}]", _leaf(v, f"{what}[{i}]")) for i, v in enumerate(value)]
        return (kind, len(value)), leaves
    return SINGLE, [(what, _leaf(value, what))]


def unflatten(structure: Structure, leaves: Sequence[Any]) -> Any:
    """The value `flatten` described, rebuilt from its arrays in the same order."""
    kind = structure[0]
    if kind == "array":
        return leaves[0]
    if kind == "dict":
        return dict(zip(structure[1], leaves, strict=True))
    values = list(leaves)
    return values if kind == "list" else tuple(values)


def width(structure: Structure) -> int:
    """How many arrays the structure holds."""
    kind = structure[0]
    if kind == "array":
        return 1
    return len(structure[1]) if kind == "dict" else int(structure[1])


def first(value: Any) -> Any:
    """The first array of a structure (the samples' count is read from it)."""
    if isinstance(value, dict):
        return value[sorted(value)[0]]
    if isinstance(value, list | tuple):
        return value[0]
    return value


def check_counts(leaves: Sequence[tuple[str, np.ndarray]], what: str) -> int:
    """The samples every array holds, the same for all; one sentence naming the one that
    differs."""
    label, reference = leaves[0]
    count = len(reference)
    for other, array in leaves[1:]:
        if len(array) != count:
            raise GpkError(
                f"{what}: {other} has {len(array)} samples but {label} has {count}; give every "
                "array the same number of samples"
            )
    return count


def _leaf(value: Any, label: str) -> np.ndarray:
    if isinstance(value, dict | list | tuple) and not _numeric_sequence(value):
        raise GpkError(
            f"{label} is itself a {type(value).__name__}; give one array per input, one level "
            "deep (a dict, list or tuple of arrays)"
        )
    array = np.asarray(value)
    if array.dtype == object:
        raise GpkError(f"{label} holds Python objects; pass a numeric NumPy array")
    if array.ndim == 0:
        raise GpkError(f"{label} is a single number; pass an array with one row per sample")
    return array


def _one_array(value: list | tuple) -> bool:
    """A plain list of numbers (or of lists of numbers) is one array, as NumPy reads it; a list
    holding arrays is several inputs, as `fit` reads it."""
    holds_arrays = any(isinstance(v, np.ndarray | dict) for v in value)
    return bool(value) and not holds_arrays and _numeric_sequence(value)


def _numeric_sequence(value: Any) -> bool:
    """A plain list of numbers (or of lists of numbers) is one array, not a structure."""
    if isinstance(value, dict):
        return False
    try:
        return np.asarray(value).dtype != object
    except ValueError:
        return False


def is_structure(value: Any) -> bool:
    """Whether `value` is several arrays (a dict, or a list or tuple holding arrays)."""
    return isinstance(value, dict) or (isinstance(value, list | tuple) and not _one_array(value))


def take_rows(value: Any, rows: np.ndarray) -> Any:
    """The samples `rows` names, from one array or each array of a structure."""
    if isinstance(value, dict):
        return {key: np.asarray(v)[rows] for key, v in value.items()}
    if isinstance(value, list | tuple) and not _one_array(value):
        return type(value)(np.asarray(v)[rows] for v in value)
    return np.asarray(value)[rows]
