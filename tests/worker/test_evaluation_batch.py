"""Validation read in batches larger than the training's: the same loss and metrics as Keras's
own evaluation, in fewer calls."""

from __future__ import annotations

import numpy as np
import pytest

# TensorFlow is imported inside each test, so the fast subset collects this module without it.
pytestmark = pytest.mark.slow


def test_small_samples_are_read_in_larger_batches_and_large_ones_in_the_global_batch():
    import tensorflow as tf

    from gpu_parallel_kit.worker.tensorflow.datasets import (
        EVALUATION_BATCH_BYTES,
        _sample_bytes,
        evaluation_batch,
    )

    tabular = (tf.TensorSpec((16,), tf.float32), tf.TensorSpec((), tf.int32))
    assert _sample_bytes(tabular) == 16 * 4 + 4
    assert evaluation_batch(32, _sample_bytes(tabular)) == EVALUATION_BATCH_BYTES // 68
    pictures = (tf.TensorSpec((512, 512, 3), tf.float32), tf.TensorSpec((), tf.int32))
    assert evaluation_batch(64, _sample_bytes(pictures)) == 64  # 3 MiB a sample: kept
    ragged = (tf.TensorSpec((None,), tf.int32), tf.TensorSpec((), tf.int32))
    assert _sample_bytes(ragged) is None
    assert evaluation_batch(32, None) == 32


def test_the_evaluator_agrees_with_kerass_evaluate_in_batches_of_the_global_batch():
    import keras
    import tensorflow as tf

    from gpu_parallel_kit.worker.tensorflow.datasets import evaluation_batch
    from gpu_parallel_kit.worker.tensorflow.engines.evaluation import Evaluator

    rng = np.random.default_rng(0)
    x = rng.standard_normal((410, 16)).astype("float32")
    y = rng.integers(0, 4, 410).astype("int32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(4)])
    model.compile(
        optimizer="sgd",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    batch = evaluation_batch(32, 16 * 4 + 4)
    assert batch > 410  # one call per evaluation instead of 13
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)
    evaluate = Evaluator(model, batches, lambda inputs: (model(inputs, training=False), 0.0))
    loss, accuracy = model.evaluate(x, y, batch_size=32, verbose=0)
    for values in (evaluate(), evaluate()):  # the first pass builds, the second is compiled
        assert values["val_loss"] == pytest.approx(loss, abs=1e-5)
        assert values["val_accuracy"] == pytest.approx(accuracy, abs=1e-6)
