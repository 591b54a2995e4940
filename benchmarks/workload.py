"""The workload both sides of the benchmark train: one model, one data set, nothing else.

Imports no TensorFlow at module level, so the benchmark's parent process can import it freely and
the kit can carry `build_model` to its workers by value.
"""

from __future__ import annotations

import numpy as np

FEATURES = 784  # an MNIST-sized input
CLASSES = 10
DEFAULT_WIDTH = 512  # 3 x Dense(512): about 1.2 M parameters, ~50 ms per step of 256 on 2 cores
DEFAULT_LAYERS = 3


def build_model(
    width: int = DEFAULT_WIDTH, layers: int = DEFAULT_LAYERS, steps_per_execution: int = 1
):
    """An MLP compiled as keras.io's distributed training guide compiles its model."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            *[keras.layers.Dense(width, activation="relu") for _ in range(layers)],
            keras.layers.Dense(CLASSES),
        ],
        name="benchmark_mlp",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
        steps_per_execution=steps_per_execution,
    )
    return model


def make_data(samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random inputs with labels a linear probe can learn, so the loss really falls."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, FEATURES), dtype=np.float32)
    y = np.argmax(x[:, :CLASSES], axis=1).astype(np.int32)
    return x, y


# The kit's built-in models on their synthetic sets (gpu_parallel_kit/worker/builtin_models.py),
# beside the MLP above: a setting that helps one and hurts another shows up in the ratios.
MODELS = ("mlp", "cnn", "transformer")
_SYNTHETIC = {"cnn": "images", "transformer": "tokens"}


def build(
    name: str = "mlp",
    width: int = DEFAULT_WIDTH,
    layers: int = DEFAULT_LAYERS,
    steps_per_execution: int = 1,
):
    """`name`'s model, compiled the same way on both sides of the benchmark (the hand-written
    side may ask for the steps per execution the kit's tune chose, as a careful user would)."""
    if name == "mlp":
        return build_model(width, layers, steps_per_execution)
    from gpu_parallel_kit.worker.builtin_models import BUILDERS, default_compile_args

    model = BUILDERS[name]()
    model.compile(**default_compile_args(), steps_per_execution=steps_per_execution)
    return model


def data_for(name: str, samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`name`'s training arrays: the MLP's above, or the built-in synthetic set of the model."""
    if name == "mlp":
        return make_data(samples, seed)
    from gpu_parallel_kit.runs.description.synthetic_data import make_synthetic

    x, y = make_synthetic(_SYNTHETIC[name], samples, seed=seed)
    return np.ascontiguousarray(x), np.ascontiguousarray(y)


def describe(name: str, width: int = DEFAULT_WIDTH, layers: int = DEFAULT_LAYERS) -> str:
    if name == "mlp":
        return f"MLP {FEATURES}-{'-'.join([str(width)] * layers)}-{CLASSES}"
    return f"the built-in {name} on the synthetic {_SYNTHETIC[name]} set"
