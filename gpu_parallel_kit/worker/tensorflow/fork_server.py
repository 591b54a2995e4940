"""What the TensorFlow fork server imports once for every run: the TensorFlow run, and an end
without interpreter teardown.

The fork server ends when its caller does (multiprocessing closes its pipe, and the server raises
SystemExit). Its interpreter holds TensorFlow, whose teardown takes 1-1.5 s on two cores; and it
holds the caller's stdout, so output read through a pipe (`gpk demo | tee log`, a CI log, a
benchmark's `subprocess.run`) would end that much after the command itself. Nothing of the
server needs tearing down: it never started TensorFlow's runtime, and its children, which
multiprocessing forks with a cleared `atexit` list, end with `os._exit` of their own.
"""

from __future__ import annotations

import atexit
import os
import sys
from multiprocessing import forkserver

from . import run  # noqa: F401 - TensorFlow, Keras and the engines, imported once


def in_fork_server() -> bool:
    """Whether this module is being imported as the fork server's preload: not by a test, a
    documentation build or anything else whose exit status matters."""
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code is forkserver.main.__code__:
            return True
        frame = frame.f_back
    return False


if in_fork_server():
    # Registered after TensorFlow's own handlers, so it runs before them (last in, first out):
    # the server's exit is immediate, as its children's are.
    atexit.register(os._exit, 0)
