"""Model builders the tests hand to workers (importable, so they pickle by reference)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np

FEATURES = 12
CLASSES = 3


def dense_chain(widths, optimizer):
    """A Sequential of ReLU Dense layers of `widths`, then logits: cuttable between any layers."""
    import keras

    model = keras.Sequential(
        [keras.Input((FEATURES,))]
        + [keras.layers.Dense(width, activation="relu") for width in widths]
        + [keras.layers.Dense(CLASSES)]
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def instant_result(spec, step_time_s=0.01, **fields):
    """A finished run's row for `spec` without a worker: for tests of what happens around runs."""
    from gpu_parallel_kit.runs.results import RunResult

    return RunResult(
        **spec.result_identity(),
        status="ok",
        step_time_s=step_time_s,
        throughput_samples_s=spec.global_batch / step_time_s,
        **fields,
    )


def saved_weights(path):
    """The arrays a run saved with save_weights=, in model.get_weights() order."""
    with np.load(path) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def largest_difference(weights, reference):
    """The largest absolute difference between two lists of weight arrays."""
    return max(float(np.max(np.abs(a - b))) for a, b in zip(weights, reference, strict=True))


def small_mlp():
    import keras

    return dense_chain([16], keras.optimizers.SGD(learning_rate=0.1))


def small_experiment(model, **settings):
    """The tests' usual experiment: small data, global batch 32, a few steps, no progress bar."""
    import gpu_parallel_kit as gpk

    defaults = dict(data=small_data(), batch_size=32, epochs=1, steps_per_epoch=3, progress=False)
    return gpk.Experiment(model=model, **{**defaults, **settings})


def small_data(samples: int = 256, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, FEATURES)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32")
    return x, y


def raising_builder():
    raise RuntimeError("the builder broke on purpose")


def exiting_builder():
    os._exit(3)


def self_killing_builder():
    os.kill(os.getpid(), signal.SIGKILL)


def sleeping_builder():
    time.sleep(120)


def memory_hungry_builder():
    raise MemoryError("cannot allocate 64 GiB for the embedding table")


def slow_when_distributed():
    """Trains normally on one device and hangs on several: a comparison to interrupt midway."""
    import tensorflow as tf

    if tf.distribute.get_strategy().num_replicas_in_sync > 1:
        time.sleep(120)
    return small_mlp()


def deep_mlp():
    """Seven Dense layers: enough to cut into 2 or 4 stages."""
    import keras

    return dense_chain([16] * 6, keras.optimizers.Adam(learning_rate=0.01))


def batch_norm_first():
    """BatchNormalization on the raw inputs, so its statistics can be checked by hand."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.BatchNormalization(momentum=0.5),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def residual_model():
    """A skip connection around a layer: the input rides past it into the Add."""
    import keras

    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(FEATURES, activation="relu")(inputs)
    outputs = keras.layers.Dense(CLASSES)(keras.layers.Add(name="add")([inputs, hidden]))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model


def wide_mlp():
    """About 2.4 MiB of parameters and Adam state: over a 1 MiB budget unless split in four."""
    return dense_chain([256] * 4, "adam")


def separable_data(samples: int = 512, seed: int = 0):
    """Three well-separated clusters: a small MLP passes 90% accuracy within an epoch or two."""
    rng = np.random.default_rng(seed)
    centers = 2.5 * np.eye(CLASSES, FEATURES, dtype="float32")
    y = rng.integers(0, CLASSES, samples).astype("int32")
    x = centers[y] + rng.standard_normal((samples, FEATURES)).astype("float32") * 0.7
    return x.astype("float32"), y


def subclassed_model():
    """A subclassed keras.Model: layers made in __init__, used in call; no variables until
    called."""
    import keras

    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            self.hidden = keras.layers.Dense(16, activation="relu")
            self.out = keras.layers.Dense(CLASSES)

        def call(self, inputs):
            return self.out(self.hidden(inputs))

    model = Net()
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def deferred_sequential():
    """A Sequential without keras.Input, built on its first call, as many tutorials write it."""
    import keras

    model = keras.Sequential(
        [keras.layers.Dense(16, activation="relu"), keras.layers.Dense(CLASSES)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def two_input_model():
    """A functional model with two named inputs, fed a dict; the second input joins late."""
    import keras

    numbers = keras.Input((FEATURES,), name="numbers")
    extra = keras.Input((4,), name="extra")
    hidden = keras.layers.Dense(16, activation="relu", name="h1")(numbers)
    hidden = keras.layers.Dense(16, activation="relu", name="h2")(hidden)
    joined = keras.layers.Concatenate(name="join")([hidden, extra])
    outputs = keras.layers.Dense(CLASSES, name="head")(joined)
    model = keras.Model({"numbers": numbers, "extra": extra}, outputs)
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def two_input_dataset():
    """Unbatched ({"numbers", "extra"}, label) samples for `two_input_model`."""
    import tensorflow as tf

    x, y = small_data(256)
    extra = np.tile(np.linspace(-1, 1, 4, dtype="float32"), (len(x), 1)) * x[:, :1]
    return tf.data.Dataset.from_tensor_slices(({"numbers": x, "extra": extra}, y))
