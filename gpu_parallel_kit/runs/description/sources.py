"""How a user's model and data cross from the notebook into a worker process.

A model crosses as a cloudpickled zero-argument builder, a built-in name or a `.keras` path; data as
NumPy arrays written once to memory-mappable `.npy` files, a built-in synthetic set, or a
cloudpickled builder of a `tf.data.Dataset`. Every source is small, picklable and validated
here, in the caller, so that mistakes surface before any worker starts.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import GpkError
from .nested_arrays import SINGLE, Structures, check_counts, flatten
from .pickled_functions import pickled
from .synthetic_data import SYNTHETIC_SETS, default_samples, synthetic_spec

BUILTIN_MODELS = {"mlp": "tabular", "cnn": "images", "transformer": "tokens"}  # model -> its data


@dataclass(frozen=True)
class ModelSource:
    """Where the worker gets the model from."""

    kind: str  # "builtin" | "builder" | "file"
    name: str = ""  # built-in name, builder's qualified name, or file path
    payload: bytes = b""  # the cloudpickled builder

    def __repr__(self) -> str:
        return f"<ModelSource {self.kind} {self.name}>"


@dataclass(frozen=True)
class DataSource:
    """Where the worker gets training data from, and how many samples it has when known."""

    kind: str  # "arrays" | "synthetic" | "dataset_builder"
    name: str = ""  # synthetic set name or builder's qualified name
    paths: tuple[
        str, ...
    ] = ()  # .npy files: x's arrays, then y's (runs/description/nested_arrays.py)
    # (x's structure, y's structure), runs/description/nested_arrays.py; () for one array each (logs
    # before nests)
    structure: tuple[Any, ...] = ()
    samples: int | None = None  # None when only the dataset itself knows
    seed: int = 0
    payload: bytes = b""

    def __repr__(self) -> str:
        size = f", {self.samples} samples" if self.samples is not None else ""
        return f"<DataSource {self.kind} {self.name or ' '.join(self.paths)}{size}>"


@dataclass(frozen=True)
class CountedSample:
    """One sample as a plan search's counting child takes it: shapes and dtypes, no values."""

    inputs: Any  # a (shape, dtype) pair per model input, alone or in a dict or list
    labels: Any = None  # the same for the labels; None: shaped like the model's output
    loss: Any = None  # the experiment's loss (a name, config or factory); None: the model's own
    given_by: str = "inputs"  # where the user gave it, for sentences: "inputs" (search), "data"


def model_source(model: Any) -> ModelSource:
    """Accept a built-in name, a `.keras` path or a zero-argument builder function."""
    if isinstance(model, str | os.PathLike):
        text = os.fspath(model)
        if text in BUILTIN_MODELS:
            return ModelSource(kind="builtin", name=text)
        if text.endswith(".keras"):
            path = pathlib.Path(text).resolve()
            if not path.is_file():
                raise GpkError(
                    f"model={text!r} does not exist; give the path of a saved .keras file"
                )
            return ModelSource(kind="file", name=str(path))
        names = ", ".join(BUILTIN_MODELS)
        raise GpkError(
            f"model={text!r} is neither a built-in model ({names}) nor a .keras file; "
            "pass one of those or a function that returns a Keras model"
        )
    if callable(model) and not hasattr(model, "fit"):
        name = _qualname(model)
        return ModelSource(kind="builder", name=name, payload=pickled(model, "model builder", name))
    if hasattr(model, "fit"):
        raise TypeError(
            "model= got a built Keras model; pass a function that builds it (e.g. "
            "model=lambda: make_model()) so each worker builds its own copy on its own devices"
        )
    raise TypeError(f"model={model!r} must be a built-in name, a .keras path or a builder function")


def default_data_for(model: ModelSource) -> str | None:
    return BUILTIN_MODELS.get(model.name) if model.kind == "builtin" else None


DATA_PREFIX = "gpk_data_"  # then the owning process's id: gpk_data_<pid>_<random>


class ArrayStore:
    """Writes arrays to a private temporary folder once, removed when the owner is collected.

    A notebook's kernel is often stopped without running Python's exit handlers, which would
    leave its folder behind; the folder is named after its process, and each new store removes
    the folders of processes that have ended."""

    def __init__(self) -> None:
        remove_orphaned_data(tempfile.gettempdir())
        self._directory = tempfile.TemporaryDirectory(prefix=f"{DATA_PREFIX}{os.getpid()}_")
        self._finalizer = weakref.finalize(self, self._directory.cleanup)

    def save(self, name: str, array: np.ndarray) -> str:
        path = pathlib.Path(self._directory.name) / f"{name}.npy"
        np.save(path, np.ascontiguousarray(array))
        return str(path)


def remove_orphaned_data(folder: str) -> list[str]:
    """Remove the data folders in `folder` whose process has ended; returns their paths."""
    if os.name != "posix":  # os.kill(pid, 0) only asks on POSIX; elsewhere it would terminate
        return []
    removed = []
    for path in pathlib.Path(folder).glob(f"{DATA_PREFIX}*_*"):
        owner = path.name.removeprefix(DATA_PREFIX).split("_", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def data_source(
    data: Any,
    seed: int,
    store: ArrayStore | None,
    samples: int | None = None,
    names: tuple[str, str] = ("x", "y"),
) -> DataSource:
    """Accept (x, y) arrays, a built-in synthetic set name, or a dataset builder function.

    `names` are the files the arrays are stored as (validation arrays get their own).
    """
    if isinstance(data, str):
        synthetic_spec(data)  # raises a clear error for an unknown name
        count = samples or default_samples(data)
        if count < 1:
            raise GpkError(f"samples={count} gives no data; use a positive number of samples")
        return DataSource(kind="synthetic", name=data, samples=count, seed=seed)
    if isinstance(data, tuple | list) and len(data) == 2:
        return _array_source(data, seed, store, names)
    if callable(data):
        name = _qualname(data)
        payload = pickled(data, "dataset builder", name)
        return DataSource(kind="dataset_builder", name=name, payload=payload, seed=seed)
    sets = ", ".join(sorted(SYNTHETIC_SETS))
    raise TypeError(
        f"data= got {type(data).__name__}; pass (x, y) arrays, a built-in set name ({sets}) "
        "or a function that returns a tf.data.Dataset of (x, y) samples"
    )


def _array_source(
    data: tuple[Any, Any] | list[Any], seed: int, store: ArrayStore | None, names: tuple[str, str]
) -> DataSource:
    """`(x, y)` with each side one array or a dict, list or tuple of arrays
    (runs/description/nested_arrays.py), each array written to a file of its own."""
    what = f"data=({names[0]}, {names[1]})" if names != ("x", "y") else "data=(x, y)"
    x_structure, x_leaves = flatten(data[0], "x")
    y_structure, y_leaves = flatten(data[1], "y")
    if x_structure == y_structure == SINGLE:
        check_arrays(x_leaves[0][1], y_leaves[0][1], what)
    else:
        for label, array in (*x_leaves, *y_leaves):
            if len(array) == 0:
                raise GpkError(f"{what}: {label} is empty; pass at least one global batch")
        samples = check_counts(x_leaves, what)
        targets = check_counts(y_leaves, what)
        if targets != samples:
            raise GpkError(
                f"{what} has {samples} inputs but {targets} targets; give x and y the same "
                "number of samples"
            )
    store = store or ArrayStore()
    paths = tuple(
        store.save(f"{names[side]}{index}", array)
        for side, leaves in enumerate((x_leaves, y_leaves))
        for index, (_, array) in enumerate(leaves)
    )
    structure = () if x_structure == y_structure == SINGLE else (x_structure, y_structure)
    return DataSource(
        kind="arrays",
        paths=paths,
        samples=len(x_leaves[0][1]),
        seed=seed,
        structure=structure,
    )


def array_structures(source: DataSource) -> Structures:
    """(x's, y's) structure of an arrays source: one array each for sources without one."""
    return Structures(*source.structure) if source.structure else Structures(SINGLE, SINGLE)


def check_arrays(
    x: np.ndarray,
    y: np.ndarray,
    what: str = "data=(x, y)",
    names: str = "x and y",
    least: str = "one global batch of samples",
) -> None:
    """Inputs and targets that a run can batch: numeric, non-empty, one target per input."""
    if x.ndim == 0 or len(x) == 0:
        raise GpkError(f"{what} is empty; pass at least {least}")
    if y.ndim == 0 or len(x) != len(y):
        raise GpkError(
            f"{what} has {len(x)} inputs but {0 if y.ndim == 0 else len(y)} targets; "
            f"give {names} the same number of samples"
        )
    if x.dtype == object or y.dtype == object:
        raise GpkError(f"{what} holds Python objects; pass numeric NumPy arrays")


def _qualname(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
