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
import os
import re
import tempfile
from collections.abc import Iterator

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


def is_chatter(line: str) -> bool:
    """True for a start-up line that says nothing about the run (see `CHATTER`)."""
    return bool(CHATTER.search(line))


def kept_lines(text: str) -> str:
    """`text` without its start-up chatter lines."""
    return "".join(line for line in text.splitlines(keepends=True) if not is_chatter(line))


@contextlib.contextmanager
def native_stderr_filtered() -> Iterator[None]:
    """Within the block, native writes to fd 2 are held back; afterwards all but the chatter is
    written back to the real stderr (everything, if the block raised)."""
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
            shown = text if failed else kept_lines(text)
            if shown:
                os.write(2, shown.encode("utf-8"))


def import_tensorflow_quietly() -> None:
    """Import TensorFlow and Keras once, without their start-up chatter."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with native_stderr_filtered():
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
