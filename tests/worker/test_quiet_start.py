"""TensorFlow's start-up chatter is held back; anything else written to stderr still shows."""

import os
import subprocess
import sys

import pytest

from gpu_parallel_kit.worker.quiet_start import hidden, kept_lines
from gpu_parallel_kit.worker.tensorflow.quiet_start import worker_log_level

ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
ONEDNN = "I0000 port.cc:153] oneDNN custom operations are on. You may see slightly different\n"


def test_chatter_lines_are_dropped_and_others_kept():
    text = ABSL + ONEDNN + "E0000 something about the user's run\n"
    assert kept_lines(text) == "E0000 something about the user's run\n"


def test_native_writes_in_the_block_are_filtered_not_lost():
    code = (
        "import os\n"
        "from gpu_parallel_kit.worker.quiet_start import native_stderr_filtered\n"
        "with native_stderr_filtered():\n"
        f"    os.write(2, {ABSL!r}.encode())\n"
        "    os.write(2, b'kept line\\n')\n"
        "os.write(2, b'after\\n')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True
    )
    assert done.stderr == "kept line\nafter\n"


CUINIT = "E0000 cuda_platform.cc:52] failed call to cuInit: INTERNAL: UNKNOWN ERROR (303)\n"
NO_DRIVERS = (
    "I0000 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.\n"
)


@pytest.mark.parametrize("drivers_missing", [True, False])
def test_cuinit_failure_is_left_out_only_where_the_import_found_no_drivers(drivers_missing):
    # TensorFlow's CUDA build on a CPU-only machine: the import says there are no drivers, then
    # the first look for GPUs logs cuInit's failure as an error; with drivers, it is a fault.
    imported = NO_DRIVERS if drivers_missing else ""
    code = (
        "import os\n"
        "from gpu_parallel_kit.worker import quiet_start as q\n"
        "from gpu_parallel_kit.worker.tensorflow import quiet_start as tq\n"
        "with q.native_stderr_filtered():\n"
        f"    os.write(2, {imported!r}.encode())\n"
        "with tq.gpus_looked_for_quietly():\n"
        f"    os.write(2, {CUINIT!r}.encode())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True
    )
    assert done.stderr == ("" if drivers_missing else CUINIT)


def test_a_hidden_package_fails_to_import_only_within_the_block():
    with hidden(("json",)), pytest.raises(ModuleNotFoundError, match="hidden"):
        import json.tool  # noqa: F401 - json itself is already imported: only new imports fail
    import json.tool  # noqa: F401, F811


@pytest.mark.slow
def test_tensorflow_imports_without_jax_or_matplotlib_which_stay_importable():
    code = (
        "import sys\n"
        "from gpu_parallel_kit.worker.tensorflow.quiet_start import import_tensorflow_quietly\n"
        "import_tensorflow_quietly()\n"
        "print(sorted(m for m in ('jax', 'matplotlib', 'tensorflow') if m in sys.modules))\n"
        "import jax, matplotlib.pyplot\n"
        "print('importable')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True
    )
    assert done.stdout.split("\n")[:2] == ["['tensorflow']", "importable"]


@pytest.mark.slow
def test_a_notebook_lists_tensorflows_gpus_without_a_stderr_line():
    # Notebook 02's first cell: TensorFlow imported and its GPUs listed in the kernel, where a
    # failed cuInit on a machine without drivers was a stderr box.
    code = (
        "from gpu_parallel_kit.worker.tensorflow.quiet_start import (\n"
        "    gpus_listed_quietly, import_tensorflow_quietly)\n"
        "import_tensorflow_quietly()\n"
        "print(type(gpus_listed_quietly()).__name__)\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert (done.stdout, done.stderr) == ("list\n", "")


def test_the_worker_keeps_everything_or_errors_only_and_raises_jaxs_default():
    assert worker_log_level(None) == "2"
    assert worker_log_level("1") == "2"  # what `import jax` sets in the caller
    assert worker_log_level("0") == "0"  # everything, asked for
    assert worker_log_level("3") == "3"
    assert worker_log_level("verbose") == "2"


DATA_PARALLEL_RUN = """
import numpy as np
import gpu_parallel_kit as gpk

def build():
    import keras
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(10)])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model

x, y = np.zeros((256, 8), "float32"), np.zeros(256, "int32")
result = gpk.Experiment(build, (x, y), batch_size=64, steps_per_epoch=2, progress=False,
                        log=None).run("data", 2)
print(result.status)
"""


@pytest.mark.slow
def test_a_data_parallel_run_after_jax_set_the_log_level_writes_nothing_to_stderr():
    # With TF_CPP_MIN_LOG_LEVEL=1 inherited, each run printed a tf.distribute warning about its
    # per-device iterators ("GeneratorDatasetOp::Dataset will not be optimized").
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"}
    done = subprocess.run(
        [sys.executable, "-c", DATA_PARALLEL_RUN],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    assert done.stdout.strip() == "ok"
    assert done.stderr == ""
