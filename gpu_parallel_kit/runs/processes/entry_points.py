"""The children's entry points, named as `"module:function"` text, and how a child enters one.

The caller never imports a child's module (docs/ARCHITECTURE.md, "the process boundary"): it
names the function, and the child imports it. Both child servers (the TensorFlow fork server in
`process.py`, the JAX server in `served.py`) start children through `enter`.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ...backends import JAX, TENSORFLOW, backend_record

# What the fork server imports once for every child: the worker, and with it TensorFlow
# (worker/tensorflow/fork_server.py).
PRELOAD = "gpu_parallel_kit.worker.tensorflow.fork_server"
# The children's entry points, named rather than imported (tests check each one exists); a
# backend's runs and discovery are named by its record.
RUN_ENTRY = TENSORFLOW.run_entry
LOCAL_CLUSTER_ENTRY = TENSORFLOW.cluster_entry
DISCOVERY_ENTRY = TENSORFLOW.discovery_entry
MEMBER_ENTRY = TENSORFLOW.member_entry
SERVED_MEMBER_ENTRY = TENSORFLOW.served_entry
STEP_MEMBER_ENTRY = TENSORFLOW.step_entry
# JAX runs: Keras on JAX, no TensorFlow; started from the JAX server
# (runs/processes/server_client.py).
JAX_RUN_ENTRY = JAX.run_entry
JAX_DISCOVERY_ENTRY = JAX.discovery_entry
JAX_MEMBER_ENTRY = JAX.member_entry
JAX_SERVED_MEMBER_ENTRY = JAX.served_entry
JAX_STEP_MEMBER_ENTRY = JAX.step_entry
JAX_SERVER_ENTRY = "gpu_parallel_kit.worker.jax.server:serve"
# A step's work counted for a projection (worker/work_count.py): a short child, on demand.
WORK_COUNT_JAX_ENTRY = "gpu_parallel_kit.worker.jax.work_count:count_with_jax"
WORK_COUNT_TF_ENTRY = "gpu_parallel_kit.worker.tensorflow.work_count:count_with_tensorflow"
ENTRIES = (
    RUN_ENTRY,
    LOCAL_CLUSTER_ENTRY,
    DISCOVERY_ENTRY,
    MEMBER_ENTRY,
    SERVED_MEMBER_ENTRY,
    STEP_MEMBER_ENTRY,
    JAX_RUN_ENTRY,
    JAX_DISCOVERY_ENTRY,
    JAX_MEMBER_ENTRY,
    JAX_SERVED_MEMBER_ENTRY,
    JAX_STEP_MEMBER_ENTRY,
    JAX_SERVER_ENTRY,
    WORK_COUNT_JAX_ENTRY,
    WORK_COUNT_TF_ENTRY,
)

__all__ = [
    "DISCOVERY_ENTRY",
    "ENTRIES",
    "JAX_DISCOVERY_ENTRY",
    "JAX_MEMBER_ENTRY",
    "JAX_RUN_ENTRY",
    "JAX_SERVED_MEMBER_ENTRY",
    "JAX_STEP_MEMBER_ENTRY",
    "JAX_SERVER_ENTRY",
    "LOCAL_CLUSTER_ENTRY",
    "MEMBER_ENTRY",
    "PRELOAD",
    "RUN_ENTRY",
    "SERVED_MEMBER_ENTRY",
    "STEP_MEMBER_ENTRY",
    "WORK_COUNT_JAX_ENTRY",
    "WORK_COUNT_TF_ENTRY",
    "enter",
    "entry_point",
    "main_module_hidden",
    "member_entry",
    "served_entry",
    "step_entry",
]
_starting = threading.Lock()


def entry_point(name: str) -> Callable[..., Any]:
    """The function `"module:function"` names, imported here (in the child)."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def member_entry(backend: str) -> str:
    """The entry point of one worker process of a run of several, on `backend`."""
    entry = backend_record(backend).member_entry
    if entry is None:
        raise ValueError(f"backend {backend!r} runs no worker processes of its own")
    return entry


def served_entry(backend: str) -> str:
    """The entry point of one worker process on a named cluster's host, on `backend`."""
    entry = backend_record(backend).served_entry
    if entry is None:
        raise ValueError(f"backend {backend!r} serves no named cluster")
    return entry


def step_entry(backend: str, several_processes: bool) -> str:
    """The entry point of one task of a Slurm job step on `backend`: one of several processes
    joining by Slurm's variables, or a run of one process."""
    record = backend_record(backend)
    entry = record.step_entry if several_processes else record.run_entry
    if not entry:
        raise ValueError(f"backend {backend!r} runs no Slurm job steps")
    return entry


def enter(entry: str, args: tuple[Any, ...], sender: Any) -> None:
    """Runs in the child: import the entry point there (TensorFlow stays out of the caller)."""
    entry_point(entry)(*args, sender)


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
    """Start children without re-running the caller's main script in them.

    multiprocessing re-imports `__main__` in every child (and in the fork server) so that functions
    defined there can be found; the kit never needs that, because builders travel by value through
    cloudpickle. Hiding the script spares users the `if __name__ == "__main__":` guard and spares
    every run from re-executing the user's whole script.
    """
    with _starting:  # a panel's thread and the kernel may both start runs at once
        yield from _hidden_main()


def _hidden_main() -> Iterator[None]:
    main = sys.modules.get("__main__")
    saved = {
        key: main.__dict__[key]
        for key in ("__file__", "__spec__")
        if main is not None and key in main.__dict__
    }
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__spec__ = None
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
            if "__spec__" not in saved:
                main.__dict__.pop("__spec__", None)
