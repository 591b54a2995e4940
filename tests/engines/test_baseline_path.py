"""The baseline trains as a user's own `fit` does, and `data`×1 differs from it only where named.

Every speedup is taken against `single`, so its code path must be the program a user writes for
one device: no tf.distribute strategy, the data set fed to `fit` as it is, Keras's own step.
Compared structurally, not by timing: the train step's graph, what `fit` iterates, the
variables' kind. `data`×1 runs the same model through MirroredStrategy; the differences that
brings are named here, each one, so a new one fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

# A TensorFlow worker's steps, up to fit, for each path, in a fresh interpreter (a process's
# TensorFlow fixes its devices once); prints what each path built, as JSON.
SCRIPT = textwrap.dedent(
    """
    import collections, json
    from gpu_parallel_kit.worker.tensorflow import run as tf_run  # TensorFlow first, quietly
    import keras, tensorflow as tf
    import gpu_parallel_kit as gpk
    from keras.src.backend.tensorflow.trainer import TFEpochIterator
    from keras.src.trainers.data_adapters import data_adapter_utils

    exp = gpk.Experiment(model="mlp", batch_size=64, epochs=1, steps_per_epoch=4,
                         progress=False, log=":memory:")
    import warnings
    warnings.filterwarnings("ignore", message=".*shuffle=True.*")

    def traced(function, seen):
        # Keras's train function closes over its tf.functions, the step inside the loop's.
        if function is None or id(function) in seen:
            return []
        seen.add(id(function))
        found = []
        if hasattr(function, "_list_all_concrete_functions"):
            found += function._list_all_concrete_functions()
        for inner in (getattr(function, "python_function", None),
                      getattr(function, "__wrapped__", None)):
            found += traced(inner, seen)
        for cell in getattr(function, "__closure__", None) or []:
            if callable(cell.cell_contents):
                found += traced(cell.cell_contents, seen)
        return found

    def step_ops(model):
        concrete = traced(model.train_function, set())
        return {
            function.name.decode().split("_on_")[-1].rsplit("_", 1)[0]: dict(
                collections.Counter(op.type for op in function.graph.get_operations())
            )
            for function in concrete
        }

    def path(model, fed):
        model.fit(fed, epochs=1, steps_per_epoch=2, verbose=0)
        if isinstance(fed, tf.data.Dataset):  # fit distributes it under the model's strategy
            fed = model.distribute_strategy.experimental_distribute_dataset(fed)
        return {
            "has_strategy": model._distribute_strategy is not None,
            "strategy": type(model.distribute_strategy).__name__,
            "fed": "dataset" if isinstance(fed, tf.data.Dataset) else type(fed).__name__,
            "variable": type(model.trainable_variables[0].value).__name__,
            "jit_compile": bool(model.jit_compile),
            "step": step_ops(model),
        }

    paths = {}
    for name in ("single", "data"):
        spec = exp.plan(name, 1)
        run = tf_run.TensorFlowRun(spec)
        if name == "single":
            names = run.set_up_devices()
        else:  # the devices are set up once per process: the same one device
            run.device_names = names
            run.engine = tf_run.make_engine(spec, names)
        steps = run.prepare_data()
        model, _ = run.build(steps, steps, 2)
        with run.scope():
            paths[name] = path(model, run.engine.fit_input(run.dataset))

    # The program a user writes: the same model and batches, no strategy at all.
    keras.utils.set_random_seed(0)
    from gpu_parallel_kit.worker.builtin_models import BUILDERS, default_compile_args
    plain = BUILDERS["mlp"]()
    plain.compile(**default_compile_args(), jit_compile=False)
    paths["plain"] = path(plain, run.dataset)
    print("PATHS" + json.dumps(paths))
    """
)


@pytest.fixture(scope="module")
def paths():
    env = {**os.environ, "GPK_WARM": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("PATHS"))
    return json.loads(line[len("PATHS") :])


def test_single_trains_with_no_strategy_as_a_users_own_fit(paths):
    single, plain = paths["single"], paths["plain"]
    assert single["has_strategy"] is False and single["strategy"] == "_DefaultDistributionStrategy"
    for key in ("strategy", "fed", "variable", "jit_compile", "step"):
        assert single[key] == plain[key], key


def test_data_on_one_device_differs_from_single_only_where_named(paths):
    single, data = paths["single"], paths["data"]
    named = {
        # Keras takes the strategy it was built under, and fit reads the replica's own share
        # of each batch from its own pipeline on the host (datasets.replica_shares), not
        # through tf.distribute's per-device iterator, which copied it between CPU devices.
        "has_strategy": (False, True),
        "strategy": ("_DefaultDistributionStrategy", "MirroredStrategy"),
        "fed": ("dataset", "DistributedDatasetsFromFunction"),
        # Every weight is a mirrored variable, with one component on one device.
        "variable": ("ResourceVariable", "MirroredVariable"),
    }
    for key, (in_single, in_data) in named.items():
        assert (single[key], data[key]) == (in_single, in_data), key
    assert single["jit_compile"] == data["jit_compile"] is False
    # The step itself: the same graph but for one Identity of the replica's outputs.
    for function, ops in single["step"].items():
        other = data["step"][function]
        differences = {
            op: other.get(op, 0) - ops.get(op, 0)
            for op in set(ops) | set(other)
            if other.get(op, 0) != ops.get(op, 0)
        }
        assert set(differences) <= {"Identity", "Placeholder"}, (function, differences)
        assert all(abs(count) <= 1 for count in differences.values()), (function, differences)
