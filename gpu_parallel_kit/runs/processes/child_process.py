"""Child processes of the caller: how they start, how they talk back, how they are stopped.

A run's TensorFlow lives in a child process (docs/ARCHITECTURE.md, "the process boundary"). The
caller names the child's entry point as `"module:function"` text and never imports it: the
module is imported in the child, where TensorFlow may be. By default children are forked from a
server that has already imported the worker (and TensorFlow, without starting its runtime), which
cuts several seconds per run; GPK_START_METHOD=spawn uses plain new interpreters.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from ...backends import backend_record
from ...errors import GpkError
from ...strategies import resolve
from .entry_points import (
    PRELOAD,
    enter,
    entry_point,
    main_module_hidden,
)
from .server_client import ServerGone

if TYPE_CHECKING:
    from ..results.run_result import RunResult

START_METHODS = ("forkserver", "spawn")
RETRY_PAUSE_S = 0.5  # before a child is started again on a server that just died

_PR_SET_PDEATHSIG = 1  # prctl option: the signal a process gets when its parent dies
_context_lock = threading.Lock()
_contexts: dict[str, multiprocessing.context.BaseContext] = {}


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the worker is already killed; `result` is the run's cancelled row."""

    def __init__(self, result: RunResult) -> None:
        super().__init__("run cancelled")
        self.result = result


def start_method() -> str:
    method = os.environ.get("GPK_START_METHOD", "forkserver")
    if method not in START_METHODS:
        raise GpkError(f"GPK_START_METHOD={method!r} is not known; use forkserver or spawn")
    return method


class WorkerNotStarted(GpkError):
    """A run's process could not be started, even on a fresh server: the run's row says why."""


def start_child(
    entry: str, *args: Any, name: str | None = None, backend: str = "tensorflow"
) -> tuple[Any, Any]:
    """Start `entry(*args, sender)` in a fresh worker process; (process, receiving end).

    A JAX child is forked from the JAX server instead (`runs/processes/server_client.py`): the
    TensorFlow fork server has Keras imported on TensorFlow, and a process's Keras keeps its first
    backend.

    A server that dies while it forks (the OOM killer picks the largest process, which is the
    server holding TensorFlow) surfaces as multiprocessing's bare `EOFError`; the child is then
    started once more on a fresh server, and a second failure is `WorkerNotStarted`, one sentence.
    """
    for attempt in (1, 2):
        try:
            return _start_child(entry, args, name, backend)
        except (EOFError, ConnectionError, ServerGone) as error:
            if attempt == 1:
                # A server killed a moment ago may not be reaped yet: multiprocessing would still
                # take it for alive (and be refused) rather than start a fresh one.
                time.sleep(RETRY_PAUSE_S)
                continue
            raise WorkerNotStarted(
                f"the {backend} worker process could not be started, twice, because its "
                f"server ended while starting it ({_said(error)}); the machine may be out "
                "of memory: close other notebooks or use smaller data"
            ) from None
    raise AssertionError("unreachable")


def _said(error: BaseException) -> str:
    return str(error) or type(error).__name__


def _start_child(
    entry: str, args: tuple[Any, ...], name: str | None, backend: str
) -> tuple[Any, Any]:
    server = backend_record(backend).server
    if server is not None and start_method() == "forkserver":
        return resolve(server)().start(entry, args)
    context = _context()
    # Both ways: the child reports its events, and a child that trains several rounds of a
    # comparison (runs/scheduling/resident_rounds.py) is told through it when the next one's turn
    # comes.
    receiver, sender = context.Pipe(duplex=True)
    process = context.Process(
        target=enter, args=(entry, args, sender), daemon=True, name=name or f"gpk-{entry}"
    )
    try:
        with main_module_hidden():
            process.start()
    except BaseException:  # Ctrl-C or a dead server while starting: leave no child behind
        stop_child(process)
        receiver.close()
        raise
    finally:
        sender.close()
    return process, receiver


def stop_child(process: Any) -> None:
    """Kill a started child and everything in its process group; harmless if it has ended."""
    pid = process.pid
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if process.is_alive():
        process.kill()
    process.join(timeout=5)


def call_in_worker(entry: str, timeout_s: float = 180.0, backend: str = "tensorflow") -> Any:
    """Call the zero-argument function `entry` names in a worker process; its picklable result.

    For work that needs TensorFlow but should not load it into the caller, such as device
    discovery: the fork server has TensorFlow imported already, so this costs a fork, not an import.
    """
    process, receiver = start_child(_CALL_AND_SEND, entry, backend=backend)
    try:
        # Woken by the answer, or by the child's end should it die without one.
        with end_of(process) as ended:
            answered = wait([receiver, *ended], timeout_s)
        if not answered:
            raise RuntimeError(f"a worker process did not answer within {timeout_s:g} s")
        if not receiver.poll(0):
            raise EOFError  # the child ended without answering
        succeeded, value = receiver.recv()
    except EOFError:
        raise RuntimeError(
            f"the worker process ended (exit code {process.exitcode}) before answering"
        ) from None
    finally:
        receiver.close()
        stop_child(process)
    if not succeeded:
        raise RuntimeError(value)
    return value


@contextlib.contextmanager
def end_of(process: Any) -> Iterator[list[Any]]:
    """What `multiprocessing.connection.wait` can wait on to wake when `process` ends.

    A pidfd where Linux has one: it is ready when the process ends, although the caller is not
    the parent of a forked server's child, and although processes the child started still hold
    its pipes (they inherit multiprocessing's own sentinel under fork and spawn). Else the
    process's sentinel, else nothing: then only the pipe's closing says the child has gone.
    """
    try:
        # A forkserver child may already have been reaped: then its sentinel is ready anyway.
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        sentinel = getattr(process, "sentinel", None)
        yield [] if sentinel is None else [sentinel]
        return
    try:
        yield [pidfd]
    finally:
        os.close(pidfd)


def parent_emitter(connection: Any) -> Callable[..., None]:
    """`emit(**event)` for a child process: sends the event to its parent. A parent that is gone
    (Ctrl-C while the child was starting) leaves nobody to report to, so the child ends quietly."""

    def emit(**event: Any) -> None:
        try:
            connection.send(event)
        except OSError:
            os._exit(0)

    return emit


def parent_word(connection: Any) -> Callable[[], bool]:
    """`next_round()` for a child that trains several rounds of a comparison
    (`runs/scheduling/resident_rounds.py`): blocks until the caller gives the next round's turn;
    False when the caller has gone, or stopped the comparison. The caller stamps the round's run id
    on its row (`runner._Watch`), so the word carries nothing else."""

    def next_round() -> bool:
        try:
            return connection.recv() == ROUND_WORD
        except (EOFError, OSError):
            return False

    return next_round


ROUND_WORD = "round"  # the caller's word to a process waiting for its next round


def die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies, however the parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def call_and_send(entry: str, sender: Any) -> None:
    """Runs in the child of `call_in_worker`: the answer, or the error as text, then exit."""
    try:
        answer = (True, entry_point(entry)())
    except BaseException as error:  # noqa: BLE001 - reported to the caller as text
        answer = (False, f"{type(error).__name__}: {error}")
    # A caller that has gone (a command line that stopped at a bad argument while its servers
    # were warming) reads no answer: nothing to say, and nothing for its terminal.
    with contextlib.suppress(OSError):
        sender.send(answer)
        sender.close()
    os._exit(0)


_CALL_AND_SEND = f"{__name__}:call_and_send"


def ensure_fork_server() -> None:
    """Start the fork server (it imports the worker and TensorFlow) if it is not running, and
    again if it has died; `runs/scheduling/servers_ahead.py` calls it ahead of the first run."""
    _context()  # sets the preload
    multiprocessing.forkserver.ensure_running()


def _context() -> multiprocessing.context.BaseContext:
    method = start_method()
    with _context_lock:
        if method not in _contexts:
            context = multiprocessing.get_context(method)
            if method == "forkserver":
                # The server imports TensorFlow once; each run is forked from it before any
                # runtime exists, so each still picks its own logical device layout.
                context.set_forkserver_preload([PRELOAD])
            _contexts[method] = context
        return _contexts[method]
