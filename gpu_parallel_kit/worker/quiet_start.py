"""TensorFlow's start-up chatter, kept out of the user's notebook.

Importing TensorFlow 2.21 writes native log lines to the process's stderr before its logging is
set up (absl's "All log messages before absl::InitializeLog() ..." and the oneDNN notice), which
TF_CPP_MIN_LOG_LEVEL does not silence because they are written before it is read. The fork server
imports TensorFlow once, in the notebook kernel's stderr, so every notebook showed them as a red
box. Here the import runs with file descriptor 2 pointed at a temporary file; afterwards every line
that is not known start-up chatter is written back, so a real error or warning still reaches the
user.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

# Lines TensorFlow writes on every start that say nothing about the user's run.
CHATTER = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|oneDNN custom operations are on"
    r"|This TensorFlow binary is optimized to use available CPU instructions"
    r"|To enable the following instructions: .* rebuild TensorFlow"
    r"|Unable to register cu(DNN|FFT|BLAS) factory"
    r"|computation placer already registered"
    r"|Could not find cuda drivers on your machine"
    r"|TF-TRT Warning: Could not find TensorRT"
)


# TensorFlow's CUDA build on a machine without CUDA drivers says so at import ("Could not find
# cuda drivers"), then fails cuInit at its first look for GPUs and logs that as an error. Only
# after the first line is the second chatter: on a machine whose drivers load, a failing cuInit is
# a real fault and still reaches the user.
NO_DRIVERS = re.compile(r"Could not find cuda drivers on your machine")
CUINIT_WITHOUT_DRIVERS = re.compile(r"failed call to cuInit")
_found_no_drivers: list[bool] = []  # set by the import, read by the first look for GPUs


def is_chatter(line: str) -> bool:
    """True for a start-up line that says nothing about the run (see `CHATTER`)."""
    return bool(CHATTER.search(line))


def kept_lines(text: str, also: re.Pattern | None = None) -> str:
    """`text` without its start-up chatter lines, nor those matching `also`."""
    return "".join(
        line
        for line in text.splitlines(keepends=True)
        if not is_chatter(line) and not (also and also.search(line))
    )


def gpus_looked_for_quietly() -> contextlib.AbstractContextManager:
    """Around TensorFlow's first look for GPUs: its cuInit failure is left out where the import
    found no CUDA drivers (`NO_DRIVERS`), kept everywhere else."""
    return native_stderr_filtered(CUINIT_WITHOUT_DRIVERS if _found_no_drivers else None)


@contextlib.contextmanager
def native_stderr_filtered(also: re.Pattern | None = None) -> Iterator[None]:
    """Within the block, native writes to fd 2 are held back; afterwards all but the chatter (and
    lines matching `also`) is written back to the real stderr (everything, if the block
    raised)."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to protect
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode("utf-8", errors="replace")
            if NO_DRIVERS.search(text):
                _found_no_drivers.append(True)
            shown = text if failed else kept_lines(text, also)
            if shown:
                os.write(2, shown.encode("utf-8"))


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


class _Hidden(importlib.abc.MetaPathFinder):
    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"{name} is hidden while the worker imports", name=name)


@contextlib.contextmanager
def hidden(names: tuple[str, ...]) -> Iterator[None]:
    """Within the block, importing one of `names` (or a submodule) fails as if it were not
    installed; a module already imported stays as it is."""
    finder = _Hidden(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
