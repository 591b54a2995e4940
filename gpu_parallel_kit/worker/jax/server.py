"""The JAX server, server side: Keras on JAX imported once, then one forked child per request.

Started by `runs/processes/server_client.py` in a spawned process. It sets `KERAS_BACKEND=jax`
before anything imports Keras, imports the JAX run's module (and with it JAX and Keras) once, and
never starts JAX's runtime itself: `jax.devices()` is first called in each child, after the child
has set its own host device count, so a child of this server is as fresh as a new interpreter but
starts in milliseconds. No TensorFlow is imported here.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import time
from typing import Any, NoReturn

os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported anywhere in this process

from ...runs.processes.child_process import die_with_parent  # noqa: E402
from ...runs.processes.entry_points import entry_point  # noqa: E402
from ...runs.processes.server_client import ServerRefused  # noqa: E402
from ..quiet_start import hidden  # noqa: E402

PRELOAD = "gpu_parallel_kit.worker.jax.run"
_POLL_S = 0.02


def serve(control: Any) -> None:
    """Answer the caller's requests until it goes away: start a run, or wait for one to end.

    The server ends when its control pipe closes, which the kernel does when the caller dies,
    however it dies. It does not ask for a parent-death signal: Linux sends that when the
    *thread* that started the server ends, and the server is often started from a short-lived
    thread (warming ahead, a panel's comparison), which would take it down after one run.
    Ctrl-C is the kernel's, not the server's: a notebook's shutdown that signals the whole
    process group would otherwise print the server's KeyboardInterrupt in JupyterLab's terminal.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # already, when started from a main thread
    try:
        # Keras's image gallery imports matplotlib.pyplot if it can; no run uses it (0.1 s).
        with hidden(("matplotlib",)):
            importlib.import_module(PRELOAD)
    except Exception as error:  # noqa: BLE001 - a broken JAX or Keras: the caller hears why
        _refuse(control, f"importing JAX and Keras failed: {type(error).__name__}: {error}")
    exit_codes: dict[int, int] = {}
    while True:
        try:
            message = control.recv()
        except (EOFError, OSError):
            os._exit(0)
        try:
            if message[0] == "start":
                answer: Any = _start(control, *message[1:])
            else:
                answer = _wait(*message[1:], exit_codes)
        except Exception as error:  # noqa: BLE001 - the caller turns it into one sentence
            answer = RuntimeError(f"{type(error).__name__}: {error}")
        control.send(answer)


def _refuse(control: Any, why: str) -> NoReturn:
    """Answer the first request with `why` and end: the caller turns it into one sentence, and
    its next request starts a fresh server, which finds a repaired install."""
    with contextlib.suppress(EOFError, OSError):
        control.recv()
        control.send(ServerRefused(why))
    os._exit(1)


def _start(control: Any, entry: str, args: tuple[Any, ...], sender: Any) -> int:
    pid = os.fork()
    if pid == 0:  # the run: never returns into the server's loop
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # a run stays interruptible
            control.close()
            die_with_parent()
            entry_point(entry)(*args, sender)
            code = 0
        finally:
            os._exit(code)
    sender.close()
    return pid


def _wait(pid: int, timeout_s: float, exit_codes: dict[int, int]) -> int | None:
    """The child's exit code once it has ended within `timeout_s`, else None.

    A bounded poll, on purpose. The child is a bare `os.fork()`, not a `multiprocessing.Process`,
    so it has no sentinel `multiprocessing.connection.wait` could wake on (its result pipe runs
    to the caller, not through this server), and a blocking `os.waitpid` takes no timeout: the
    server could not give up at `timeout_s` and answer the caller. A pidfd (`os.pidfd_open`) is
    waitable, but Linux-only (5.3+). So the server looks every `_POLL_S`, at most until
    `timeout_s`.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if pid in exit_codes:
            return exit_codes.pop(pid)
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return exit_codes.pop(pid, 0)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            _reap_others(exit_codes)
            return None
        time.sleep(_POLL_S)


def _reap_others(exit_codes: dict[int, int]) -> None:
    """Collect any other ended child, so none stays a zombie while nobody asks for it."""
    with contextlib.suppress(ChildProcessError):
        while True:
            done, status = os.waitpid(-1, os.WNOHANG)
            if not done:
                return
            exit_codes[done] = os.waitstatus_to_exitcode(status)
