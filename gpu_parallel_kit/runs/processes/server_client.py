"""The JAX server, caller side: one long-lived process with JAX and Keras imported, forking runs.

A process's Keras keeps the backend it was first imported with, so JAX runs cannot come from the
TensorFlow fork server: the kit spawns a server of its own that imports JAX and Keras once
(without starting JAX's runtime, so each run still chooses its own host device count) and forks
one child per run (`worker/jax/server.py`). The child's pipe travels to the server as a pickled
`Connection`; the server answers with the child's pid. A `ServedChild` follows the child with
what `stop_child` and the runner use of a `multiprocessing.Process` (`process.end_of` waits
through a pidfd, as the caller is not its parent).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from multiprocessing.connection import wait
from typing import Any

from .entry_points import JAX_SERVER_ENTRY, enter, main_module_hidden

START_TIMEOUT_S = 180.0  # the first request waits for the server to import JAX and Keras

_lock = threading.Lock()
_server: JaxServer | None = None


class ServerGone(RuntimeError):
    """The JAX server ended before answering a request (killed, or JAX missing)."""


class ServerRefused(RuntimeError):
    """The JAX server could not import JAX and Keras; its message says why (sent by the server
    in answer to the first request, then raised as it is)."""


class JaxServer:
    """The caller's handle on the JAX server process; requests are answered one at a time."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._control, server_end = context.Pipe(duplex=True)
        self._process = context.Process(
            target=enter,
            args=(JAX_SERVER_ENTRY, (), server_end),
            daemon=True,
            name="gpk-jax-server",
        )
        with main_module_hidden(), _interrupts_held():
            self._process.start()
        server_end.close()
        self._requests = threading.Lock()

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    def request(self, *message: Any, timeout_s: float = START_TIMEOUT_S) -> Any:
        """Send one request and wait for its answer; a server that is gone raises RuntimeError."""
        with self._requests:
            try:
                self._control.send(message)
                # The sentinel too: a server that died answers nothing, and its pipe stays open
                # while a run it forked is still dying with it.
                if not wait([self._control, self._process.sentinel], timeout_s):
                    raise RuntimeError(f"the JAX server did not answer within {timeout_s:g} s")
                if not self._control.poll(0):
                    raise EOFError  # the server ended without answering
                answer = self._control.recv()
            except (EOFError, OSError, BrokenPipeError):
                raise ServerGone(
                    f"the JAX server ended (exit code {self._process.exitcode}); is JAX "
                    'installed? pip install "gpu_parallel_kit[jax]"'
                ) from None
        if isinstance(answer, ServerRefused):
            raise answer
        if isinstance(answer, BaseException):
            raise RuntimeError(f"the JAX server could not start a run: {answer}")
        return answer

    def start(self, entry: str, args: tuple[Any, ...]) -> tuple[ServedChild, Any]:
        """Fork `entry(*args, sender)` from the server; (child, receiving end of its pipe)."""
        # Both ways, as for the fork server's children (`runs/processes/child_process.py`).
        receiver, sender = multiprocessing.Pipe(duplex=True)
        try:
            pid = self.request("start", entry, args, sender)
        except BaseException:
            receiver.close()
            raise
        finally:
            sender.close()
        return ServedChild(self, pid), receiver

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._control.close()
        if self._process.is_alive():
            self._process.kill()
        self._process.join(timeout=5)


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C ignored while this thread starts the server, which inherits the disposition
    through exec (an ignored signal stays ignored) and so ignores it from its first instruction.

    A kernel's shutdown interrupts its whole process group. A server still importing JAX and
    Keras would die of it, or print its KeyboardInterrupt in JupyterLab's terminal; `serve()`
    ignores Ctrl-C only once it runs. Blocking it instead would not do: spawning resets the
    signal mask. Only the main thread may set a disposition; a server started from another
    thread (warming ahead, the panel) keeps that window of its start. The caller ignores Ctrl-C
    for the milliseconds of the fork and exec."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class ServedChild:
    """A run forked by the JAX server, followed from the caller like a `multiprocessing.Process`.

    The server, its parent, reaps it; `join` asks the server for the exit code (negative: the
    signal that ended it, as `multiprocessing` reports it).
    """

    def __init__(self, server: JaxServer, pid: int) -> None:
        self._server = server
        self.pid = pid
        self.exitcode: int | None = None

    def join(self, timeout: float | None = None) -> None:
        if self.exitcode is not None:
            return
        wait_s = 5.0 if timeout is None else max(0.0, timeout)
        try:
            self.exitcode = self._server.request("wait", self.pid, wait_s, timeout_s=wait_s + 30)
        except RuntimeError:
            self.exitcode = -int(signal.SIGKILL)  # the server is gone, and its children with it

    def is_alive(self) -> bool:
        self.join(0)
        return self.exitcode is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, signal.SIGKILL)


def jax_server() -> JaxServer:
    """The JAX server, started on first use and again if it has gone."""
    global _server
    with _lock:
        if _server is None or not _server.alive:
            _server = JaxServer()
        return _server


def stop_jax_server() -> None:
    """End the server (tests; a notebook that wants the memory back). The next JAX run restarts
    it."""
    global _server
    with _lock:
        if _server is not None:
            _server.stop()
            _server = None
