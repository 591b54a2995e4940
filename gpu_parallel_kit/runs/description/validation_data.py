"""Where the held-out data comes from: arrays, a fraction of the training data, or a builder.

Checked here, in the caller, like the training data (`runs/description/sources.py`), so a mistake is
one sentence before any worker starts. A fraction is held out at random (from the seed) before the
training arrays are stored, so the training data never contains a validation sample.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ...errors import GpkError
from .nested_arrays import check_counts, flatten, is_structure, take_rows
from .sources import ArrayStore, DataSource, check_arrays, data_source
from .synthetic_data import default_samples, make_synthetic, synthetic_spec

VALIDATION_NAMES = ("x_val", "y_val")
_FORMS = (
    "pass (x_val, y_val) arrays, a fraction of the training data such as 0.1, or a function "
    "returning a tf.data.Dataset of unbatched (x, y) samples"
)


class HoldoutIndices(NamedTuple):
    """Which samples train and which are held out to validate, each sorted."""

    training: np.ndarray
    validation: np.ndarray


class TrainingSources(NamedTuple):
    """The data a run trains on, and the data it validates on (None without validation)."""

    training: DataSource
    validation: DataSource | None


def holdout_indices(samples: int, fraction: float, seed: int) -> HoldoutIndices:
    """(training, validation) sample indices: round(fraction × samples) held out at random.

    >>> train, held = holdout_indices(10, 0.2, seed=0); len(train), len(held)
    (8, 2)
    """
    held = round(samples * fraction)
    if held < 1 or held >= samples:
        raise GpkError(
            f"validation={fraction:g} of {samples} samples holds out {held}; leave at least one "
            "sample on each side, e.g. validation=0.1 with more data"
        )
    order = np.random.default_rng([seed, 7919]).permutation(samples)
    return HoldoutIndices(np.sort(order[held:]), np.sort(order[:held]))


def training_and_validation(
    data: Any,
    validation: Any,
    seed: int,
    store: ArrayStore,
    samples: int | None = None,
) -> TrainingSources:
    """The training source and the validation source (None without validation)."""
    if validation is None:
        return TrainingSources(data_source(data, seed=seed, store=store, samples=samples), None)
    if isinstance(validation, bool):
        raise TypeError(f"validation={validation!r} is not validation data; {_FORMS}")
    if isinstance(validation, int | float):
        return _held_out(data, float(validation), seed, store, samples)
    training = data_source(data, seed=seed, store=store, samples=samples)
    if isinstance(validation, tuple | list) and len(validation) == 2:
        if any(is_structure(side) for side in validation):  # several inputs or outputs
            return TrainingSources(
                training,
                data_source(tuple(validation), seed=seed, store=store, names=VALIDATION_NAMES),
            )
        x, y = (np.asarray(a) for a in validation)
        _check_validation_arrays(x, y, _input_shape(data))
        return TrainingSources(
            training, data_source((x, y), seed=seed, store=store, names=VALIDATION_NAMES)
        )
    if callable(validation) and not isinstance(validation, str):
        return TrainingSources(training, data_source(validation, seed=seed, store=None))
    raise TypeError(f"validation= got {type(validation).__name__}; {_FORMS}")


def _held_out(
    data: Any, fraction: float, seed: int, store: ArrayStore, samples: int | None
) -> TrainingSources:
    if not 0.0 < fraction < 1.0:
        raise GpkError(
            f"validation={fraction:g} is not a fraction between 0 and 1; use e.g. 0.1 to hold "
            "out 10% of the training data"
        )
    if isinstance(data, str):
        synthetic_spec(data)  # a clear error for an unknown name
        x, y = make_synthetic(data, samples or default_samples(data), seed=seed)
    elif isinstance(data, tuple | list) and len(data) == 2:
        if any(is_structure(side) for side in data):  # several inputs or outputs
            samples = check_counts(flatten(data[0], "x")[1], "data=(x, y)")
            train, held = holdout_indices(samples, fraction, seed)
            parts = [tuple(take_rows(side, rows) for side in data) for rows in (train, held)]
            return TrainingSources(
                data_source(parts[0], seed=seed, store=store),
                data_source(parts[1], seed=seed, store=store, names=VALIDATION_NAMES),
            )
        x, y = (np.asarray(a) for a in data)
    else:
        raise GpkError(
            f"validation={fraction:g} holds out part of array or built-in data, but data= is "
            f"{type(data).__name__}; pass validation= a function returning the validation dataset"
        )
    check_arrays(x, y)
    train, held = holdout_indices(len(x), fraction, seed)
    return TrainingSources(
        data_source((x[train], y[train]), seed=seed, store=store),
        data_source((x[held], y[held]), seed=seed, store=store, names=VALIDATION_NAMES),
    )


def _input_shape(data: Any) -> tuple[int, ...] | None:
    """Each training sample's input shape, when the caller knows it."""
    if isinstance(data, str):
        return synthetic_spec(data).input_shape
    if isinstance(data, tuple | list) and len(data) == 2 and not is_structure(data[0]):
        return tuple(np.shape(data[0])[1:])
    return None


def _check_validation_arrays(x: np.ndarray, y: np.ndarray, shape: tuple[int, ...] | None) -> None:
    check_arrays(x, y, "validation=(x_val, y_val)", "x_val and y_val", least="one sample")
    if shape is not None and tuple(x.shape[1:]) != shape:
        raise GpkError(
            f"validation inputs have shape {tuple(x.shape[1:])} per sample but the training "
            f"inputs {shape}; give x_val the training data's sample shape"
        )
