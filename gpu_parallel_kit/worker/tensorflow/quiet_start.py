"""TensorFlow imported once, without its start-up chatter, at its native log level for a worker.

Importing TensorFlow 2.21 writes native log lines to the process's stderr before its logging is
set up (absl's "All log messages before absl::InitializeLog() ..." and the oneDNN notice), which
TF_CPP_MIN_LOG_LEVEL does not silence because they are written before it is read. The fork server
imports TensorFlow once, in the notebook kernel's stderr, so every notebook showed them as a red
box. The import runs inside `worker/quiet_start.native_stderr_filtered`, which writes back every
line that is not known start-up chatter, so a real error or warning still reaches the user.
"""

from __future__ import annotations

import contextlib
import os
import re

from ..quiet_start import found_no_cuda_drivers, hidden, native_stderr_filtered

# TensorFlow's CUDA build on a machine without CUDA drivers says so at import ("Could not find
# cuda drivers"), then fails cuInit at its first look for GPUs and logs that as an error. Only
# after the first line is the second chatter: on a machine whose drivers load, a failing cuInit is
# a real fault and still reaches the user.
CUINIT_WITHOUT_DRIVERS = re.compile(r"failed call to cuInit")


def gpus_looked_for_quietly() -> contextlib.AbstractContextManager:
    """Around TensorFlow's first look for GPUs: its cuInit failure is left out where the import
    found no CUDA drivers (`quiet_start.NO_DRIVERS`), kept everywhere else."""
    return native_stderr_filtered(CUINIT_WITHOUT_DRIVERS if found_no_cuda_drivers() else None)


def gpus_listed_quietly() -> list:
    """TensorFlow's physical GPUs (`tf.config.list_physical_devices("GPU")`, which does not
    start its runtime), listed inside `gpus_looked_for_quietly`: how a notebook or a worker
    looks at TensorFlow's device list without a stderr box on a machine without drivers.

    Example: `import_tensorflow_quietly(); gpus = gpus_listed_quietly()`.
    """
    import tensorflow as tf

    with gpus_looked_for_quietly():
        return tf.config.list_physical_devices("GPU")


def worker_log_level(current: str | None) -> str:
    """TensorFlow's native log level in a worker: errors only ("2"), unless everything ("0") was
    asked for.

    "1" is not taken as a choice: `import jax` sets it as its own default in any process that
    imports JAX (a test session, a kernel that used JAX), and the fork server inherits it. At "1"
    every data-parallel run printed tf.distribute's "Input of GeneratorDatasetOp::Dataset will
    not be optimized" into the notebook, a warning about TensorFlow's own per-device iterators.
    """
    return current if current in ("0", "2", "3") else "2"


def import_tensorflow_quietly() -> None:
    """Import TensorFlow and Keras once, without their start-up chatter, and without the
    optional imports a TensorFlow run never uses (`UNUSED_BY_A_TENSORFLOW_RUN`)."""
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = worker_log_level(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
    with native_stderr_filtered(), hidden(UNUSED_BY_A_TENSORFLOW_RUN):
        import keras  # noqa: F401
        import tensorflow  # noqa: F401


# Packages TensorFlow and Keras import when they are installed, only for features a TensorFlow
# run never reaches: TensorFlow Lite takes `jax.jit` for converting JAX functions, and Keras's
# image gallery takes `matplotlib.pyplot`. Both are installed beside the kit (the JAX backend,
# the plots), and importing them cost the fork server 0.9 s of its start on two cores, before
# any first run. Each import falls back to None when the package is missing; hidden only while
# TensorFlow and Keras import, so a user's code can still import them in the run.
UNUSED_BY_A_TENSORFLOW_RUN = ("jax", "jaxlib", "matplotlib")
