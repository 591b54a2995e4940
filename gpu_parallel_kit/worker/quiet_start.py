"""Native start-up chatter kept out of the user's notebook, and imports hidden while a backend
imports: what both backends' workers share.

Importing TensorFlow writes native log lines to the process's stderr before its logging is set up
(absl's "All log messages before absl::InitializeLog() ..." and the oneDNN notice), and a JAX run
whose builder imports it (keras-hub does) writes them too. Within `native_stderr_filtered` file
descriptor 2 points at a temporary file; afterwards every line that is not known start-up chatter
is written back, so a real error or warning still reaches the user. TensorFlow's own quiet import
is `worker/tensorflow/quiet_start.py`.
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


# TensorFlow's CUDA build on a machine without CUDA drivers says so at import; noted here, so that
# its first look for GPUs can leave out the cuInit failure that follows
# (`tensorflow/quiet_start.gpus_looked_for_quietly`).
NO_DRIVERS = re.compile(r"Could not find cuda drivers on your machine")
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


def found_no_cuda_drivers() -> bool:
    """Whether a filtered block so far heard that there are no CUDA drivers (`NO_DRIVERS`)."""
    return bool(_found_no_drivers)


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
