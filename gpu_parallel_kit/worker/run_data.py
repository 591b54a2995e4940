"""A run's arrays and its steps per epoch, read without TensorFlow (both backends use them)."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..errors import GpkError
from ..runs.description.nested_arrays import Samples, first, unflatten, width
from ..runs.description.run_spec import RunSpec
from ..runs.description.sources import DataSource, array_structures
from ..runs.description.synthetic_data import make_synthetic


@functools.lru_cache(maxsize=4)
def arrays(source: DataSource) -> Samples:
    """Once per worker: the dataset, the labels' check and the validation share them."""
    if source.kind == "synthetic":
        return make_synthetic(source.name, source.samples or 0, seed=source.seed)
    # Memory-mapped: the file written once by the caller is shared by every run's page cache.
    loaded = [np.load(path, mmap_mode="r") for path in source.paths]
    x_structure, y_structure = array_structures(source)
    split = width(x_structure)
    return Samples(unflatten(x_structure, loaded[:split]), unflatten(y_structure, loaded[split:]))


def run_arrays(source: DataSource) -> Samples:
    """(x, y) of arrays or a synthetic set; a dataset builder needs TensorFlow's tf.data."""
    if source.kind == "dataset_builder":
        raise GpkError(
            f"the dataset builder {source.name} gives a tf.data.Dataset, which a JAX run does not "
            "read; pass (x, y) arrays, or use backend='tensorflow'"
        )
    return arrays(source)


def steps_per_epoch(spec: RunSpec, samples: int) -> int:
    return spec.training.steps_per_epoch or steps_from_samples(samples, spec.global_batch)


def steps_from_samples(samples: int | None, global_batch: int) -> int:
    if samples is None:
        raise GpkError(
            "the dataset's length is unknown (infinite or filtered); pass steps_per_epoch="
        )
    steps = math.floor(samples / global_batch)
    if steps < 1:
        raise GpkError(
            f"the data has {samples} samples, fewer than one global batch of {global_batch}; "
            f"use batch_size <= {samples} or more data"
        )
    return steps


def sample_count(x: Any) -> int:
    """Samples in `x`: one array, or the first of a dict, list or tuple of them."""
    return len(first(x))
