"""Servers started ahead: the first run finds its server ready and its devices listed.

As soon as the kit knows it will run (`%load_ext gpu_parallel_kit`, the first `Experiment(...)`,
`gpk` parsing a run command), `warm` starts the backend's server and lists its devices in a
background thread, so a notebook's first run no longer pays seconds of imports. A run that
arrives early waits for that same server and discovery instead of starting another. Nothing
starts on a bare import; `GPK_WARM=0` turns warming off. A server that fails to start is not
reported here: the first run tries again and says why (`errors.BackendUnavailable`).
"""

from __future__ import annotations

import contextlib
import os
import threading

from ...backends import backend_record
from ...strategies import resolve
from ..description.device_choice import default_backend, discover_physical_devices
from ..processes.child_process import ensure_fork_server, start_method

WARM_ENV = "GPK_WARM"

_lock = threading.Lock()
_warming: dict[str, threading.Thread] = {}


def warming_enabled() -> bool:
    return os.environ.get(WARM_ENV, "1") != "0"


def warm(backend: str | None = None) -> threading.Thread | None:
    """Start `backend`'s server (default: TensorFlow where installed, else JAX) and list its
    devices in the background, once per process; the thread doing it, or None when warming is
    off or already under way."""
    if not warming_enabled():
        return None
    backend = backend or default_backend()
    with _lock:
        if backend in _warming:
            return None
        thread = threading.Thread(
            target=_warm, args=(backend,), daemon=True, name=f"gpk-warm-{backend}"
        )
        _warming[backend] = thread
    thread.start()
    return thread


def start_server(backend: str) -> None:
    """The backend's server, started if it is not running (and again if it has died)."""
    if start_method() != "forkserver":
        return  # plain new interpreters: nothing to start ahead
    server = backend_record(backend).server
    if server is None:
        ensure_fork_server()
    else:
        resolve(server)()


def _warm(backend: str) -> None:
    # Any failure is the first run's to report: it starts the server again and says why.
    with contextlib.suppress(Exception):
        start_server(backend)
        discover_physical_devices(backend)
