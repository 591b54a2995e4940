"""Turn a run's model and data sources into a compiled Keras model and a batched tf.data pipeline.

Runs inside the worker, under the run's strategy scope, so variables land on the run's devices.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import cloudpickle
import keras
import numpy as np
import tensorflow as tf

from ..errors import GpkError
from ..runs.sources import DataSource, ModelSource
from ..runs.spec import TrainingConfig
from ..runs.synthetic import make_synthetic
from .batching import batch_indices
from .builtin_models import BUILDERS, default_compile_args
from .keras_internals import compile_config, user_metrics


class BuilderError(Exception):
    """The user's model or dataset builder raised; the worker reports the original error."""


def load_model(source: ModelSource) -> keras.Model:
    if source.kind == "builtin":
        return BUILDERS[source.name]()
    if source.kind == "file":
        return keras.models.load_model(source.name)
    builder = cloudpickle.loads(source.payload)
    try:
        model = builder()
    except Exception as error:
        raise BuilderError(f"the model builder {source.name} raised") from error
    if not isinstance(model, keras.Model):
        raise GpkError(
            f"the model builder {source.name} returned {type(model).__name__}, not a Keras model; "
            "make it return the model"
        )
    return model


def compile_model(
    model: keras.Model,
    source: ModelSource,
    training: TrainingConfig,
    steps_per_execution: int = 1,
    jit_compile: bool | str = "auto",
) -> None:
    """Compile with the experiment's choices, else the model's own, else the built-in defaults.

    `steps_per_execution` and `jit_compile` come from tune (runs/tuning.py), which already let
    the user's own values win; "auto" leaves XLA to Keras (off under a strategy)."""
    given = {"optimizer": _resolve(training.optimizer), "loss": _resolve(training.loss)}
    if training.metrics:
        given["metrics"] = list(training.metrics)
    given = {k: v for k, v in given.items() if v is not None}
    if getattr(model, "compiled", False) and not given:
        args = {
            "optimizer": model.optimizer,
            "loss": model.loss,
            "metrics": user_metrics(model),
        }
    elif source.kind == "builtin":
        args = {**default_compile_args(), **given}
    else:
        args = dict(given)
        if getattr(model, "compiled", False):
            args.setdefault("optimizer", model.optimizer)
            args.setdefault("loss", model.loss)
    if args.get("loss") is None or args.get("optimizer") is None:
        raise GpkError(
            "the model comes uncompiled; compile it in the builder or pass optimizer= and loss= "
            "to the Experiment (e.g. optimizer='adam', loss='sparse_categorical_crossentropy')"
        )
    if compile_config(model).get("run_eagerly"):
        # The user asked for eager execution (to debug, or to compare with eager code): keep it.
        args["run_eagerly"] = True
    # Recompiling inside the strategy scope builds the optimizer's slots on the run's devices.
    if compile_config(model).get("run_eagerly"):
        jit_compile = False  # Keras would refuse XLA with eager execution, with a warning
    model.compile(**args, steps_per_execution=steps_per_execution, jit_compile=jit_compile)


def _resolve(value):
    """Strings and config dicts pass through to Keras; a zero-argument factory is called here."""
    if callable(value) and not isinstance(value, str | dict) and not hasattr(value, "get_config"):
        return value()
    if isinstance(value, dict) and "class_name" in value:
        return keras.saving.deserialize_keras_object(value)
    return value


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
    x, y = _arrays(source)
    steps = training.steps_per_epoch or _steps_from_samples(len(x), global_batch)
    order = batch_indices(
        len(x), global_batch, steps * training.epochs, training.seed, training.shuffle
    )
    x_all, y_all = tf.constant(np.asarray(x)), tf.constant(np.asarray(y))
    dataset = tf.data.Dataset.from_tensor_slices(order).map(
        lambda idx: (tf.gather(x_all, idx), tf.gather(y_all, idx)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return dataset.repeat().prefetch(tf.data.AUTOTUNE), steps


def with_prefetch(dataset: tf.data.Dataset, batches: int | None) -> tf.data.Dataset:
    """At least `batches` batches ahead (tune: two executions' worth), tf.data's autotuning
    otherwise kept: one execution of several steps then never waits for its next batch."""
    return dataset.prefetch(batches) if batches else dataset


def make_validation_dataset(source: DataSource, batch: int) -> tf.data.Dataset:
    """The validation samples in batches of `batch` (the last one may be smaller), one pass."""
    if source.kind == "dataset_builder":
        dataset = _dataset_from_builder(source)
        if int(dataset.cardinality().numpy()) == int(tf.data.INFINITE_CARDINALITY):
            raise GpkError(
                f"the validation dataset of {source.name} never ends; make it finite, "
                "e.g. with .take(1000)"
            )
        return dataset.batch(batch).prefetch(tf.data.AUTOTUNE)
    x, y = _arrays(source)
    dataset = tf.data.Dataset.from_tensor_slices((np.asarray(x), np.asarray(y)))
    return dataset.batch(batch).cache().prefetch(tf.data.AUTOTUNE)


def _builder_pipeline(
    source: DataSource, training: TrainingConfig, global_batch: int
) -> tuple[tf.data.Dataset, int]:
    """The user's own dataset: their order and shuffling, batched to the global batch here."""
    dataset = _dataset_from_builder(source)
    samples = int(dataset.cardinality().numpy())
    steps = training.steps_per_epoch or _steps_from_samples(
        samples if samples >= 0 else None, global_batch
    )
    # drop_remainder: every step carries the full global batch, split evenly over the replicas.
    dataset = dataset.batch(global_batch, drop_remainder=True).repeat()
    return dataset.prefetch(tf.data.AUTOTUNE), steps


def labels(source: DataSource) -> np.ndarray | None:
    """The targets, when the data is arrays (memory-mapped: reading their maximum is cheap)."""
    return None if source.kind == "dataset_builder" else _arrays(source)[1]


@functools.lru_cache(maxsize=4)
def _arrays(source: DataSource) -> tuple[np.ndarray, np.ndarray]:
    """Once per worker: the dataset, the labels' check and the validation share them."""
    if source.kind == "synthetic":
        return make_synthetic(source.name, source.samples or 0, seed=source.seed)
    x_path, y_path = source.paths
    # Memory-mapped: the file written once by the caller is shared by every run's page cache.
    return np.load(x_path, mmap_mode="r"), np.load(y_path, mmap_mode="r")


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


def _steps_from_samples(samples: int | None, global_batch: int) -> int:
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
