"""Every private Keras name the kit uses (`keras_internals.py` at the worker's root, in
`worker/tensorflow/` and in `worker/jax/`), tried on the installed Keras under each backend the
worker runs: TensorFlow and JAX.

Each access runs in a fresh interpreter per backend (the test process never imports Keras) on a
real compiled model, so a Keras release that renames or drops one, or moves it on one backend
only, fails its own test here, with the access's own message, instead of a run failing with an
AttributeError.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

PROBE = textwrap.dedent(
    """
    import json, os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import types

    import keras
    from gpu_parallel_kit.worker import keras_internals as shared
    from gpu_parallel_kit.worker.jax import keras_internals as on_jax
    from gpu_parallel_kit.worker.tensorflow import keras_internals as on_tensorflow

    ki = types.SimpleNamespace(**{**vars(shared), **vars(on_jax), **vars(on_tensorflow)})

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="d")])
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
    scheduled = keras.optimizers.SGD(keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5))

    def compile_config():
        config = ki.compile_config(model)
        assert config["loss"] == "mse" and config["metrics"] == ["mae"], config

    def compile_loss_class():
        loss = ki.compile_loss_class()("mse", None, output_names=None)
        assert float(loss(keras.ops.ones((2, 2)), keras.ops.zeros((2, 2)))) == 1.0

    def compile_metrics_class():
        metrics = ki.compile_metrics_class()(["mae"], None, output_names=None)
        metrics.update_state(keras.ops.ones((2, 2)), keras.ops.zeros((2, 2)))
        assert float(metrics.result()["mae"]) == 1.0

    def unscale_loss_for_distribution():
        assert float(ki.unscale_loss_for_distribution(keras.ops.convert_to_tensor(2.0))) == 2.0

    def compiled_metrics():
        assert hasattr(ki.compiled_metrics(model), "update_state")

    def user_metrics():
        assert ki.user_metrics(model) == ["mae"]

    def raw_learning_rate():
        assert isinstance(ki.raw_learning_rate(model.optimizer), keras.Variable)
        schedule = ki.raw_learning_rate(scheduled)
        assert isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule)

    def dispatches_async():
        class Plain(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                pass

        # No backend dispatches a callback that is not async-safe to a thread.
        assert ki.dispatches_async([Plain()]) is False
        import keras.src.backend as backend

        backend.IS_THREAD_SAFE = True  # as the JAX and torch backends are (TensorFlow is not)
        assert ki.dispatches_async([Plain()]) is False
        Plain.async_safe = True
        assert ki.dispatches_async([Plain()]) is True

    def set_seed_without_tensorflow():
        import random

        import numpy as np
        from keras.src.utils.rng_utils import get_random_seed

        ki.set_seed_without_tensorflow(7)
        first = (random.random(), float(np.random.rand()), float(keras.random.uniform(())))
        ki.set_seed_without_tensorflow(7)
        again = (random.random(), float(np.random.rand()), float(keras.random.uniform(())))
        assert get_random_seed() == 7 and first == again, (first, again)

    def is_functional():
        assert ki.is_functional(model) is False  # a Sequential: its layers run in turn
        assert ki.is_functional(model.layers[0]) is False
        x = keras.Input((4,))
        assert ki.is_functional(keras.Model(x, keras.layers.Dense(3)(x))) is True

    def run_calls():
        x = keras.Input((4,), name="x")
        inner = keras.Model(x, keras.layers.Dense(3, name="b")(keras.layers.Dense(5, name="a")(x)))
        seen = []

        def call(layer, *args, **kwargs):
            seen.append(layer.name)
            return layer(*args, **kwargs)

        out = ki.run_calls(inner, keras.Input((4,)), call)
        assert seen == ["a", "b"] and tuple(out.shape) == (None, 3), (seen, out.shape)

    def spare_fits_symbolic_build():
        if keras.backend.backend() != "tensorflow":
            return  # only TensorFlow's fit builds through `_maybe_symbolic_build`
        import numpy as np
        import tensorflow as tf

        fresh = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        fresh.compile(optimizer="sgd", loss="mse", metrics=["mae"])
        data = tf.data.Dataset.from_tensor_slices((np.ones((8, 4)), np.ones((8, 2)))).batch(4)
        assert ki.spare_fits_symbolic_build(fresh, data.element_spec) is True
        assert sorted(fresh.fit(data, verbose=0).history) == ["loss", "mae"]
        fresh.compile(optimizer="adam", loss="mae", metrics=["mse"])  # unbuilt again: Keras's
        assert sorted(fresh.fit(data, verbose=0).history) == ["loss", "mse"]

    def missing_piece_is_one_sentence():
        try:
            ki.raw_learning_rate(object())
        except ki.KerasInternalsChanged as error:
            text = str(error)
            assert "optimizer._learning_rate" in text and "keras>=3.15,<3.16" in text, text
        else:
            raise AssertionError("no KerasInternalsChanged for a missing attribute")

    def place_initial_values_from_host():
        import importlib
        lib = importlib.import_module("keras.src.backend.jax.distribution_lib")
        original = lib.distribute_tensor
        ki.place_initial_values_from_host()
        assert lib.distribute_tensor.from_host and lib.distribute_tensor is not original
        ki.place_initial_values_from_host()  # a second call keeps the first wrapper
        assert lib.distribute_tensor.from_host
        lib.distribute_tensor = original

    outcome = {"backend": keras.backend.backend()}
    for check in (compile_config, compile_loss_class, compile_metrics_class,
                  unscale_loss_for_distribution, compiled_metrics, user_metrics,
                  raw_learning_rate, dispatches_async, set_seed_without_tensorflow,
                  is_functional, run_calls, spare_fits_symbolic_build,
                  missing_piece_is_one_sentence, place_initial_values_from_host):
        try:
            check()
            outcome[check.__name__] = "ok"
        except Exception as error:
            outcome[check.__name__] = f"{type(error).__name__}: {error}"
    print(json.dumps(outcome))
    """
)
ACCESSES = (
    "compile_config",
    "compile_loss_class",
    "compile_metrics_class",
    "unscale_loss_for_distribution",
    "compiled_metrics",
    "user_metrics",
    "raw_learning_rate",
    "dispatches_async",
    "set_seed_without_tensorflow",
    "is_functional",
    "run_calls",
    "spare_fits_symbolic_build",
    "missing_piece_is_one_sentence",
    "place_initial_values_from_host",
)

# What the backends' modules read every access through, not accesses of their own.
HELPERS = ("changed", "private")

BACKENDS = ("tensorflow", "jax")


@pytest.fixture(scope="module", params=BACKENDS)
def outcome(request) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KERAS_BACKEND": request.param},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("backend") == request.param, "Keras ran on another backend"
    return result


@pytest.mark.parametrize("access", ACCESSES)
def test_the_private_keras_piece_is_there(outcome, access):
    assert outcome[access] == "ok", outcome[access]


def test_every_access_of_the_module_is_tried(outcome):
    import ast
    import pathlib

    worker = pathlib.Path(__file__).parents[2] / "gpu_parallel_kit/worker"
    public = {
        node.name
        for folder in ("", "tensorflow", "jax")
        for node in ast.parse((worker / folder / "keras_internals.py").read_text()).body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }
    public -= set(HELPERS)
    assert public <= set(outcome), sorted(public - set(outcome))
