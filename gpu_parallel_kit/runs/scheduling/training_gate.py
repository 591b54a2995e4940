"""The training gate: the next run of a comparison starts while the last one still measures.

The gate is one lock file per caller process. A run holds it exclusively (an `flock`, released
by the kernel however the process ends) from the end of its training until its process ends,
and passes through it just before its first training step; the caller starts the next run only
after the last one took the gate. First rounds preparing together each take a shared `flock`
while they set up, then give it back (`share`). GPUs are left out (`overlaps`): two processes
would each hold device memory. Why: `docs/results.md`, "What a round costs".
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import tempfile
import threading
import time
from collections.abc import Callable

_lock = threading.Lock()
_path: str | None = None
_held: list[int] = []  # a run's file descriptor on the gate, open until its process ends
_shared: list[int] = []  # a run's shared hold, while it prepares beside the others
# A run that prepares under a share and computes nothing for this long gives it back (`share`).
IDLE_SHARE_S = 5.0
IDLE_CPU = 0.05  # of one core: a process using less is waiting, not computing
WATCH_S = 0.5  # how often the share's watcher looks


def gate_path() -> str:
    """This caller's gate file, made on first use and removed when the caller exits."""
    global _path
    with _lock:
        if _path is None:
            descriptor, _path = tempfile.mkstemp(prefix="gpk-gate-")
            os.close(descriptor)
            atexit.register(_remove, _path)
        return _path


def overlaps(device_kind: str) -> bool:
    """Whether a run on these devices may overlap the next run's start: not on GPUs, where both
    processes would hold device memory at once."""
    return device_kind != "gpu"


def hold(path: str | None) -> None:
    """Take the gate until this process ends (the run has trained; what follows is not timed).
    Nothing when the run has no gate."""
    if path is None or _held:
        return
    _held.append(_locked(path, fcntl.LOCK_EX))


def share(path: str | None, limit_s: float | None = None) -> None:
    """Take a share of the gate while this run prepares beside the comparison's other runs
    (`runs/scheduling/resident_rounds.py`): no run passes the gate, so none times a step, until
    every share is given back. Nothing when the run has no gate.

    The share is given back early in two cases, so that the runs ready beside this one need not
    wait for it. One: the run has computed nothing for `IDLE_SHARE_S` (a builder that sleeps, a
    collective that waits for a peer that never comes); idle, it disturbs no timed step. Two:
    `limit_s` (the run's timeout) has passed, however far the run has got; it then times out
    alone, at its turn, as it would have without preparing beside the others."""
    if path is None or _shared:
        return
    descriptor = _locked(path, fcntl.LOCK_SH)
    _shared.append(descriptor)
    threading.Thread(target=_watch_share, args=(descriptor, limit_s), daemon=True).start()


def _watch_share(descriptor: int, limit_s: float | None) -> None:
    began = last = idle_since = time.monotonic()
    used = time.process_time()  # every thread of this process: what it computes
    while descriptor in _shared:
        time.sleep(WATCH_S)
        now, cpu = time.monotonic(), time.process_time()
        if cpu - used > IDLE_CPU * (now - last):
            idle_since = now
        last, used = now, cpu
        if now - idle_since >= IDLE_SHARE_S or (limit_s and now - began >= limit_s):
            unshare()


def unshare() -> None:
    """Give back this run's share: it has prepared, and waits for its turn to time steps."""
    with _lock:  # the share's watcher may give it back from its own thread
        while _shared:
            _let_go(_shared.pop())


def release() -> None:
    """Give the gate back before the process ends: a run that trains another round of its
    comparison in this process (`runs/scheduling/resident_rounds.py`) waits for its turn without
    holding it."""
    while _held:
        _let_go(_held.pop())


def hold_in_caller() -> Callable[[], None]:
    """Take a share of this caller's gate now, for the caller's own work that no run may time
    steps beside (a step counted ahead, `runs/scheduling/step_counting.CountAhead`); returns what
    gives it back. A share, as runs that prepare together take: they may prepare beside it."""
    descriptor = _locked(gate_path(), fcntl.LOCK_SH)
    return lambda: _let_go(descriptor)


def pass_through(path: str | None) -> float:
    """Wait until no other run holds the gate; the seconds waited (left out of start-up)."""
    if path is None:
        return 0.0
    started = time.perf_counter()
    try:
        descriptor = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return 0.0  # the caller has gone: nothing can train beside this run
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        os.close(descriptor)
    return time.perf_counter() - started


def _locked(path: str, mode: int) -> int:
    """A descriptor on the gate file, locked in `mode` (shared or exclusive) once it may be."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(descriptor, mode)
    return descriptor


def _let_go(descriptor: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(descriptor, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        os.close(descriptor)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
