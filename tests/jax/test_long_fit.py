"""A long epoch on host devices: fit may not queue executions without bound.

Keras 3.15's JAX `fit` runs ahead of async-safe callbacks; with hundreds of executions queued
on 2 host devices, XLA's in-process all-reduce deadlocks and aborts the process (a
`DataParallel` fit of 300 steps of this MLP did, in the kit and in a plain Keras script). The
kit's timer keeps the loop a few executions ahead (`recorder.StepTimer`).
"""

from __future__ import annotations

import numpy as np
import pytest

import gpu_parallel_kit as gpk

pytestmark = pytest.mark.slow


def wide_mlp():
    import keras

    model = keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_a_data_parallel_epoch_of_300_steps_on_host_devices_trains(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20 * 256, 784)).astype("float32")
    y = rng.integers(0, 10, 20 * 256)
    exp = gpk.Experiment(
        model=wide_mlp,
        data=(x, y),
        batch_size=256,
        epochs=1,
        steps_per_epoch=300,
        backend="jax",
        measure_comm=False,
        progress=False,
        log=str(tmp_path / "runs.sqlite"),
    )
    result = exp.run("data", 2)
    assert result.ok, result.reason
    assert len(result.step_times_s) == 300 - result.warmup_steps
