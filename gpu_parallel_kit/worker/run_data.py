"""A run's arrays and its steps per epoch, read without TensorFlow (both backends use them)."""

from __future__ import annotations

import functools
import math

import numpy as np

from ..errors import GpkError
from ..runs.sources import DataSource
from ..runs.spec import RunSpec
from ..runs.synthetic import make_synthetic


@functools.lru_cache(maxsize=4)
def arrays(source: DataSource) -> tuple[np.ndarray, np.ndarray]:
    """Once per worker: the dataset, the labels' check and the validation share them."""
    if source.kind == "synthetic":
        return make_synthetic(source.name, source.samples or 0, seed=source.seed)
    x_path, y_path = source.paths
    # Memory-mapped: the file written once by the caller is shared by every run's page cache.
    return np.load(x_path, mmap_mode="r"), np.load(y_path, mmap_mode="r")


def run_arrays(source: DataSource) -> tuple[np.ndarray, np.ndarray]:
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
