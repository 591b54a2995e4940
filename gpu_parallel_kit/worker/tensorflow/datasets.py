"""Turn a run's data source into a batched tf.data pipeline, and build a model from its data.

Runs inside the worker, under the run's strategy scope, so variables land on the run's devices.
Loading and compiling the model, which need no TensorFlow, live in `compiling.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import cloudpickle
import keras
import numpy as np
import tensorflow as tf

from ...errors import GpkError
from ...runs.description.run_spec import TrainingConfig
from ...runs.description.sources import DataSource
from ..batching import batch_indices
from ..compiling import BuilderError
from ..run_data import arrays, sample_count, steps_from_samples

# An evaluation batch holds at most this many bytes of samples (`evaluation_batch`), so a
# validation set of images is still read in modest pieces.
EVALUATION_BATCH_BYTES = 16 * 2**20


def build_from_data(model: keras.Model, element_spec: Any) -> None:
    """Give a model that makes its variables on first call (a Sequential without `keras.Input`,
    a subclassed `keras.Model`) its variables now, before any optimizer state exists.

    The optimizer's slots are built from `model.trainable_variables`; built for a model that has
    none yet, they would belong to an empty list and the first step would fail. One call on zeros
    shaped like a single sample, in inference mode, creates the variables under the run's
    strategy scope and changes no state a training step would (no BatchNormalization update, no
    dropout); every strategy builds the same way, so initial weights stay equal across them.
    """
    if model.built and model.weights:
        return
    inputs = element_spec[0] if isinstance(element_spec, tuple) else element_spec
    sample = tf.nest.map_structure(
        lambda spec: tf.zeros([1, *[d or 1 for d in spec.shape[1:]]], dtype=spec.dtype), inputs
    )
    try:
        model(sample, training=False)
    except Exception as error:
        raise BuilderError(
            f"the model {model.name!r} could not be called on one sample of the data "
            f"(inputs {_shapes(inputs)})"
        ) from error


def _shapes(specs: Any) -> str:
    return ", ".join(f"{tuple(spec.shape)} {spec.dtype.name}" for spec in tf.nest.flatten(specs))


def make_dataset(
    source: DataSource, training: TrainingConfig, global_batch: int
) -> tuple[tf.data.Dataset, int]:
    """A pipeline of full global batches for the whole run, and the number of steps per epoch."""
    if source.kind == "dataset_builder":
        return _builder_pipeline(source, training, global_batch)
    order, steps = _order(source, training, global_batch)
    return _gathered(order, *_tensors(source)), steps


ReplicaShares = Callable[[int, int], tf.data.Dataset]


def replica_shares(
    source: DataSource, training: TrainingConfig, global_batch: int
) -> ReplicaShares | None:
    """`shares(index, count)`: replica `index`'s own pipeline of its share of every global batch
    (of `count` contiguous shares, as MirroredStrategy splits a batch), reading only its rows, in
    the same order as `make_dataset`'s. None for a dataset builder, whose batches exist only
    once its pipeline has run."""
    if source.kind == "dataset_builder":
        return None

    # Drawn on the first share asked for: only `data` on CPU devices reads shares.
    @functools.cache
    def order() -> np.ndarray:
        return _order(source, training, global_batch)[0]

    def shares(index: int, count: int) -> tf.data.Dataset:
        size = global_batch // count
        # The run's one copy of the arrays as tensors, shared by every replica's pipeline.
        return _gathered(order()[:, index * size : (index + 1) * size], *_tensors(source))

    return shares


def _order(
    source: DataSource, training: TrainingConfig, global_batch: int
) -> tuple[np.ndarray, int]:
    """The sample indices of every step's global batch, and the steps per epoch."""
    samples = sample_count(arrays(source)[0])
    steps = training.steps_per_epoch or steps_from_samples(samples, global_batch)
    order = batch_indices(
        samples, global_batch, steps * training.epochs, training.seed, training.shuffle
    )
    return order, steps


@functools.lru_cache(maxsize=2)
def _tensors(source: DataSource) -> tuple[Any, Any]:
    """The run's arrays as tensors, made once per worker."""
    x, y = arrays(source)
    return _constants(x), _constants(y)


def _gathered(order: np.ndarray, x_all: Any, y_all: Any) -> tf.data.Dataset:
    dataset = tf.data.Dataset.from_tensor_slices(order).map(
        lambda idx: (_gather(x_all, idx), _gather(y_all, idx)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return dataset.repeat().prefetch(tf.data.AUTOTUNE)


def with_prefetch(dataset: tf.data.Dataset, batches: int | None) -> tf.data.Dataset:
    """At least `batches` batches ahead (tune: two executions' worth), tf.data's autotuning
    otherwise kept: one execution of several steps then never waits for its next batch."""
    return dataset.prefetch(batches) if batches else dataset


def make_validation_dataset(source: DataSource, batch: int) -> tf.data.Dataset:
    """The validation samples in batches of `batch` or more (`evaluation_batch`; the last one
    may be smaller), one pass."""
    in_memory = source.kind != "dataset_builder"  # arrays: read once, kept for every pass
    if in_memory:
        x, y = arrays(source)
        dataset = tf.data.Dataset.from_tensor_slices((_loaded(x), _loaded(y)))
    else:
        dataset = _dataset_from_builder(source)
        if int(dataset.cardinality().numpy()) == int(tf.data.INFINITE_CARDINALITY):
            raise GpkError(
                f"the validation dataset of {source.name} never ends; make it finite, "
                "e.g. with .take(1000)"
            )
    batches = dataset.batch(evaluation_batch(batch, _sample_bytes(dataset.element_spec)))
    return (batches.cache() if in_memory else batches).prefetch(tf.data.AUTOTUNE)


def evaluation_batch(batch: int, sample_bytes: int | None) -> int:
    """The batch an evaluation reads at a time: the training's global batch at least, larger
    while its samples stay under `EVALUATION_BATCH_BYTES`. An evaluation is one compiled call
    per batch, and a run that validates every few steps evaluates tens of times: in batches of
    32 samples, 410 validation samples cost 13 calls, most of each the call's own overhead. The
    loss and metrics are sums over samples, so the batch changes nothing but rounding. Unknown
    sample sizes (a dataset's dimension of None) keep the global batch."""
    if not sample_bytes:
        return batch
    return max(batch, EVALUATION_BATCH_BYTES // sample_bytes)


def _sample_bytes(spec: Any) -> int | None:
    """Bytes of one sample (inputs and targets), or None when a dimension is unknown."""
    total = 0
    for part in tf.nest.flatten(spec):
        if not part.shape.is_fully_defined():
            return None
        total += part.shape.num_elements() * part.dtype.size
    return total


def _builder_pipeline(
    source: DataSource, training: TrainingConfig, global_batch: int
) -> tuple[tf.data.Dataset, int]:
    """The user's own dataset: their order and shuffling, batched to the global batch here."""
    dataset = _dataset_from_builder(source)
    samples = int(dataset.cardinality().numpy())
    steps = training.steps_per_epoch or steps_from_samples(
        samples if samples >= 0 else None, global_batch
    )
    # drop_remainder: every step carries the full global batch, split evenly over the replicas.
    dataset = dataset.batch(global_batch, drop_remainder=True).repeat()
    return dataset.prefetch(tf.data.AUTOTUNE), steps


def numpy_pass(source: DataSource, training: TrainingConfig, global_batch: int) -> tuple[Any, Any]:
    """A dataset builder's samples as NumPy (x, y), in its own order, for a JAX run: one pass of
    the dataset, or as many samples as the run trains on when it never ends. The run then takes
    its batches in that order, as a TensorFlow run does (a shuffle inside the builder is drawn
    once here). TensorFlow sees no GPU: the run's devices are JAX's."""
    tf.config.set_visible_devices([], "GPU")
    dataset = _dataset_from_builder(source)
    samples = int(dataset.cardinality().numpy())
    if samples < 0:  # infinite or unknown: what the run will read
        steps = training.steps_per_epoch or steps_from_samples(None, global_batch)
        samples = steps * training.epochs * global_batch
    whole = next(dataset.take(samples).batch(samples).as_numpy_iterator(), None)
    if whole is None or len(whole) != 2:
        raise GpkError(
            f"the dataset builder {source.name} gave no (x, y) samples; make it return a "
            "tf.data.Dataset of unbatched (x, y) samples"
        )
    return whole[0], whole[1]


def labels(source: DataSource) -> np.ndarray | None:
    """The targets, when the data is one array of them (memory-mapped: reading their maximum is
    cheap); None for a dataset builder and for several outputs' targets."""
    if source.kind == "dataset_builder":
        return None
    targets = arrays(source)[1]
    return targets if isinstance(targets, np.ndarray) else None


def _loaded(value: Any) -> Any:
    """Arrays read into memory, in a structure tf.data takes as several tensors: a list of
    arrays would be stacked into one, so it goes in as a tuple (Keras reads both alike)."""
    loaded = tf.nest.map_structure(np.asarray, value)
    return tuple(loaded) if isinstance(loaded, list) else loaded


def _constants(value: Any) -> Any:
    return tf.nest.map_structure(tf.constant, _loaded(value))


def _gather(values: Any, rows: tf.Tensor) -> Any:
    return tf.nest.map_structure(lambda v: tf.gather(v, rows), values)


def _dataset_from_builder(source: DataSource) -> tf.data.Dataset:
    builder = cloudpickle.loads(source.payload)
    try:
        dataset = builder()
    except Exception as error:
        raise BuilderError(f"the dataset builder {source.name} raised") from error
    if not isinstance(dataset, tf.data.Dataset):
        raise GpkError(
            f"the dataset builder {source.name} returned {type(dataset).__name__}; "
            "make it return a tf.data.Dataset of unbatched (x, y) samples"
        )
    return dataset
