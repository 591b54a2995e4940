"""Every private name the kit reads of Keras and JAX, tried on the installed versions, and the
list of them in docs/testing.md ("Private names the kit reads") kept equal to the one tried here.

`NAMES` is that list: one case per name, read by the module named beside it, looked up on the
installed library (a module attribute, or an attribute of a real compiled model, optimizer or
callback list). The Keras accesses (`keras_internals.py` at the worker's root, in
`worker/tensorflow/` and in `worker/jax/`) are also called, each on a real compiled model, under
each backend the worker runs: TensorFlow and JAX.

Both run in a fresh interpreter per backend (the test process never imports Keras or JAX), so a
release that renames or drops a name, or moves it on one backend only, fails its own test here,
naming the library, its version and the name, instead of a run failing with an AttributeError.
TensorFlow and keras-hub have none: the kit reads only their public API.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
from typing import NamedTuple

import pytest

ROOT = pathlib.Path(__file__).parents[2]
KIT = ROOT / "gpu_parallel_kit"
TESTING_PAGE = ROOT / "docs" / "testing.md"
SECTION = "## Private names the kit reads"


class PrivateName(NamedTuple):
    """One private name of a library, as the kit reads it."""

    library: str  # as the docs name it: "Keras" or "JAX"
    reader: str  # the kit's module that reads it, under gpu_parallel_kit/
    name: str  # a dotted module path and attribute, or `Owner.attribute` of a built object


LIBRARIES = {"Keras": "keras", "JAX": "jax"}  # the distribution each is installed as

SHARED = "worker/keras_internals.py"
ON_TENSORFLOW = "worker/tensorflow/keras_internals.py"
ON_JAX = "worker/jax/keras_internals.py"
NAMES = tuple(
    PrivateName(*entry)
    for entry in (
        ("Keras", SHARED, "Model._compile_config.config"),
        ("Keras", SHARED, "Model._compile_metrics"),
        ("Keras", SHARED, "CompileMetrics._user_metrics"),
        ("Keras", SHARED, "Optimizer._learning_rate"),
        ("Keras", SHARED, "keras.src.trainers.compile_utils.CompileLoss"),
        ("Keras", SHARED, "keras.src.models.functional.Functional"),
        ("Keras", SHARED, "Functional._run_through_graph"),
        ("Keras", SHARED, "Functional._inputs_struct"),
        ("Keras", ON_TENSORFLOW, "keras.src.trainers.compile_utils.CompileMetrics"),
        ("Keras", ON_TENSORFLOW, "keras.src.losses.loss.unscale_loss_for_distribution"),
        ("Keras", ON_TENSORFLOW, "CallbackList._async_train"),
        ("Keras", ON_TENSORFLOW, "Model._symbolic_build"),
        ("Keras", ON_TENSORFLOW, "Model._maybe_symbolic_build"),
        ("Keras", ON_TENSORFLOW, "Model._flatten_layers"),
        ("Keras", ON_TENSORFLOW, "Model._compile_metrics"),
        ("Keras", ON_TENSORFLOW, "Model._compile_loss"),
        ("Keras", ON_JAX, "keras.src.backend.common.global_state.set_global_attribute"),
        ("Keras", ON_JAX, "keras.src.utils.rng_utils.GLOBAL_RANDOM_SEED"),
        ("Keras", ON_JAX, "keras.src.random.seed_generator.GLOBAL_SEED_GENERATOR"),
        ("Keras", ON_JAX, "keras.src.backend.jax.distribution_lib.distribute_tensor"),
        ("Keras", ON_JAX, "Layer._layers"),
        ("JAX", "worker/jax/device_setup.py", "jax._src.xla_bridge.logger"),
        ("JAX", "worker/jax/joining.py", "jax._src.clusters.ClusterEnv"),
        ("JAX", "worker/jax/joining.py", "jax._src.clusters.ClusterEnv._cluster_types"),
        ("JAX", "worker/jax/joining.py", "jax._src.clusters.ClusterEnv.opt_in_only_method"),
        ("JAX", "worker/jax/joining.py", "jax._src.clusters.ClusterEnv.is_env_present"),
        ("JAX", "worker/jax/joining.py", "jax._src.clusters.ClusterEnv.name"),
    )
)

PROBE = textwrap.dedent(
    """
    import importlib, json, os, sys
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
    x = keras.Input((4,))
    functional = keras.Model(x, keras.layers.Dense(3)(x))

    # What an `Owner.attribute` name is read off: the objects the kit reads it of in a run.
    OWNERS = {
        "Model": lambda: model,
        "Functional": lambda: functional,
        "CompileMetrics": lambda: model._compile_metrics,
        "Optimizer": lambda: model.optimizer,
        "CallbackList": lambda: keras.callbacks.CallbackList([]),
        "Layer": lambda: keras.layers.Dense(2),
    }

    def looked_up(name):
        parts = name.split(".")
        if parts[0] in OWNERS:
            found, rest = OWNERS[parts[0]](), parts[1:]
        else:
            for cut in range(len(parts), 0, -1):
                try:
                    found, rest = importlib.import_module(".".join(parts[:cut])), parts[cut:]
                    break
                except ImportError:
                    continue
            else:
                raise ImportError(f"no module {parts[0]}")
        for attribute in rest:
            found = getattr(found, attribute)
        return found

    names = {}
    for name in json.loads(sys.argv[1]):
        try:
            looked_up(name)
            names[name] = "ok"
        except Exception as error:
            names[name] = f"{type(error).__name__}: {error}"

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

    def sublayers():
        class Block(keras.layers.Layer):
            def __init__(self):
                super().__init__()
                self.inner = keras.layers.Dense(3, name="inner")

        assert [layer.name for layer in ki.sublayers(Block())] == ["inner"]
        assert ki.sublayers(model) == model.layers and ki.sublayers(model.layers[0]) == []

    outcome = {"backend": keras.backend.backend(), "names": names}
    for check in (compile_config, compile_loss_class, compile_metrics_class,
                  unscale_loss_for_distribution, compiled_metrics, user_metrics,
                  raw_learning_rate, dispatches_async, set_seed_without_tensorflow,
                  is_functional, run_calls, spare_fits_symbolic_build,
                  missing_piece_is_one_sentence, place_initial_values_from_host, sublayers):
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
    "sublayers",
)

# What the backends' modules read every access through, not accesses of their own.
HELPERS = ("changed", "private")

BACKENDS = ("tensorflow", "jax")


@functools.cache
def probed(backend: str) -> dict:
    """What the probe found with Keras on `backend`: each access's outcome, and each name's."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(sorted({entry.name for entry in NAMES}))],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "KERAS_BACKEND": backend},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("backend") == backend, "Keras ran on another backend"
    return result


def backends_reading(reader: str) -> tuple[str, ...]:
    """The Keras backends whose runs import `reader`: its backend's folder, or both."""
    return tuple(b for b in BACKENDS if f"worker/{b}/" in reader) or BACKENDS


@pytest.fixture(scope="module", params=BACKENDS)
def outcome(request) -> dict[str, str]:
    return {k: v for k, v in probed(request.param).items() if k != "names"}


@pytest.mark.slow
@pytest.mark.parametrize("access", ACCESSES)
def test_the_private_keras_piece_is_there(outcome, access):
    assert outcome[access] == "ok", outcome[access]


@pytest.mark.slow
@pytest.mark.parametrize(
    "entry", [pytest.param(e, id=f"{e.library}-{e.reader}-{e.name}") for e in NAMES]
)
def test_the_private_name_is_there(entry):
    version = importlib.metadata.version(LIBRARIES[entry.library])
    for backend in backends_reading(entry.reader):
        found = probed(backend)["names"][entry.name]
        assert found == "ok", (
            f"{entry.library} {version} has no {entry.name}, which gpu_parallel_kit/"
            f"{entry.reader} reads (with Keras on {backend}: {found})"
        )


@pytest.mark.slow
def test_every_access_of_the_module_is_tried(outcome):
    worker = KIT / "worker"
    public = {
        node.name
        for folder in ("", "tensorflow", "jax")
        for node in ast.parse((worker / folder / "keras_internals.py").read_text()).body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }
    public -= set(HELPERS)
    assert public <= set(outcome), sorted(public - set(outcome))


def listed_in_the_docs() -> list[PrivateName]:
    """The rows of the table under "Private names the kit reads" in docs/testing.md."""
    text = TESTING_PAGE.read_text()
    assert SECTION in text, f"docs/testing.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    cells = [[cell.strip().strip("`") for cell in row.strip("|").split("|")] for row in rows]
    return [PrivateName(*row[:3]) for row in cells[1:] if not set(row[0]) <= set("-")]


def test_the_docs_list_the_names_tried_here():
    listed = listed_in_the_docs()
    assert len(listed) == len(set(listed)), "docs/testing.md lists a name twice"
    assert set(listed) == set(NAMES), {
        "in the docs only": sorted(set(listed) - set(NAMES)),
        "tried here only": sorted(set(NAMES) - set(listed)),
    }


# Names the kit reaches with a leading underscore that are no library's private API: the
# standard library's documented `os._exit` and `sys._getframe`, and the kit's own classes.
NOT_A_LIBRARYS = {"os._exit", "sys._getframe", "super()._placements", "super()._place"}
PRIVATE_MODULE = re.compile(r"\b(keras\.src|jax\._src|tensorflow\.python|keras_hub\.src)\b")


def private_reads(source: str) -> set[str]:
    """What a module reaches of other code's private names: private module paths it imports or
    names in a string, and `_`-prefixed attributes of anything but itself (`self`, `cls`)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and PRIVATE_MODULE.match(node.module or ""):
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if PRIVATE_MODULE.match(alias.name)}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= {node.value} if PRIVATE_MODULE.match(node.value) else set()
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            reached = f"{ast.unparse(node.value)}.{node.attr}"
            if ast.unparse(node.value) not in ("self", "cls") and reached not in NOT_A_LIBRARYS:
                found.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and _private(str(node.args[1].value))
            and ast.unparse(node.args[0]) not in ("self", "cls")
        ):
            found.add(node.args[1].value)
    return found


def _private(attribute: str) -> bool:
    """A `_name`: not a dunder, and not a `_name_` of a protocol such as IPython's `_repr_png_`."""
    return attribute.startswith("_") and not attribute.endswith("_")


def test_every_private_name_the_kit_reads_is_listed():
    unlisted = []
    for path in sorted(KIT.rglob("*.py")):
        module = str(path.relative_to(KIT))
        listed = [entry.name for entry in NAMES if entry.reader == module]
        parts = {part for name in listed for part in name.split(".")}
        for read in sorted(private_reads(path.read_text())):
            if "." in read:  # a module path: a listed name lies inside it
                known = any(name == read or name.startswith(f"{read}.") for name in listed)
            else:
                known = read in parts
            if not known:
                unlisted.append(f"gpu_parallel_kit/{module} reads {read}")
    assert not unlisted, f"not in NAMES (nor in docs/testing.md): {unlisted}"
