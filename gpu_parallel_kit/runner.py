"""Run one spec in a fresh worker process and turn whatever happens into a RunResult.

A fresh process per run (DESIGN.md, decision 1) lets each run choose its own logical devices,
keeps collectives of different sizes apart, gives clean memory figures, and isolates faults: a
builder that raises, an out-of-memory error, a segfault, a hang or a Ctrl-C ends only that run.
By default workers are forked from a server that has already imported TensorFlow (without starting
its runtime), which cuts several seconds per run; GPK_START_METHOD=spawn uses plain new
interpreters.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from .failures import classify_exit
from .results import RunResult
from .spec import RunSpec

START_METHODS = ("forkserver", "spawn")
POLL_INTERVAL_S = 0.1  # how often the parent checks for cancel and timeout: well under 2 s
_context_lock = threading.Lock()
_starting = threading.Lock()
_contexts: dict[str, multiprocessing.context.BaseContext] = {}

EventHandler = Callable[[dict[str, Any]], None]
T = TypeVar("T")


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the worker is already killed; `result` is the run's cancelled row."""

    def __init__(self, result: RunResult) -> None:
        super().__init__("run cancelled")
        self.result = result


def start_method() -> str:
    method = os.environ.get("GPK_START_METHOD", "forkserver")
    if method not in START_METHODS:
        from .errors import GpkError

        raise GpkError(f"GPK_START_METHOD={method!r} is not known; use forkserver or spawn")
    return method


def _context() -> multiprocessing.context.BaseContext:
    method = start_method()
    with _context_lock:
        if method not in _contexts:
            context = multiprocessing.get_context(method)
            if method == "forkserver":
                # The server imports TensorFlow once; each run is forked from it before any
                # runtime exists, so each still picks its own logical device layout.
                context.set_forkserver_preload(["gpu_parallel_kit.worker"])
            _contexts[method] = context
        return _contexts[method]


def run_isolated(
    spec: RunSpec,
    on_event: EventHandler | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Run `spec` in its own process; always returns a result, whatever the worker did.

    Ctrl-C kills the worker's whole process group and raises RunInterrupted carrying the
    cancelled row, so callers keep what finished before and stop what comes after.
    """
    if spec.strategy == "multiworker" and spec.cluster is not None:
        from .coordinator import run_on_cluster  # noqa: PLC0415 - named clusters only

        return run_on_cluster(spec, on_event, cancel)
    context = _context()
    receiver, sender = context.Pipe(duplex=False)
    entry = _local_cluster_entry if spec.strategy == "multiworker" else _worker_entry
    process = context.Process(
        target=entry, args=(spec, sender), daemon=True, name=f"gpk-{spec.run_id}"
    )
    watch = _Watch(spec, on_event or (lambda event: None), cancel)
    try:
        with _main_module_hidden():
            process.start()
        sender.close()
        result = watch.follow(process, receiver)
    except KeyboardInterrupt:
        _kill(process)
        raise RunInterrupted(watch.failed("cancelled", "cancelled by Ctrl-C")) from None
    finally:
        receiver.close()
    _kill(process)
    return result


def call_in_worker(function: Callable[[], T], timeout_s: float = 180.0) -> T:
    """Call a module-level function in a worker process and return its (picklable) result.

    For work that needs TensorFlow but should not load it into the caller, such as device
    discovery: the fork server has TensorFlow imported already, so this costs a fork, not an import.
    """
    context = _context()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_call_and_send, args=(function, sender), daemon=True)
    try:
        with _main_module_hidden():
            process.start()
        sender.close()
        if not receiver.poll(timeout_s):
            raise RuntimeError(f"a worker process did not answer within {timeout_s:g} s")
        succeeded, value = receiver.recv()
    except EOFError:
        raise RuntimeError(
            f"the worker process ended (exit code {process.exitcode}) before answering"
        ) from None
    finally:
        receiver.close()
        _kill(process)
    if not succeeded:
        raise RuntimeError(value)
    return value


def parent_emitter(connection: Any) -> Callable[..., None]:
    """`emit(**event)` for a child process: sends the event to its parent. A parent that is gone
    (Ctrl-C while the child was starting) leaves nobody to report to, so the child ends quietly."""

    def emit(**event: Any) -> None:
        try:
            connection.send(event)
        except OSError:
            os._exit(0)

    return emit


def start_child(target: Callable[..., None], *args: Any) -> tuple[Any, Any]:
    """Start `target(*args, sender)` in a fresh worker process; (process, receiving end)."""
    context = _context()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=target, args=(*args, sender), daemon=True)
    with _main_module_hidden():
        process.start()
    sender.close()
    return process, receiver


def stop_child(process: Any) -> None:
    """Kill a started child and everything in its process group; harmless if it has ended."""
    _kill(process)


def _worker_entry(spec: RunSpec, sender: Any) -> None:
    """Runs in the child: the worker module (and TensorFlow) is never imported by the caller."""
    from .worker import worker_main  # noqa: PLC0415 - preloaded by the fork server

    worker_main(spec, sender)


def _local_cluster_entry(spec: RunSpec, sender: Any) -> None:
    """Runs in the child: a launcher that starts the run's local workers (local_cluster.py)."""
    from .local_cluster import launch_local_cluster  # noqa: PLC0415

    launch_local_cluster(spec, sender)


def _call_and_send(function: Callable[[], Any], sender: Any) -> None:
    try:
        answer = (True, function())
    except BaseException as error:  # noqa: BLE001 - reported to the caller as text
        answer = (False, f"{type(error).__name__}: {error}")
    sender.send(answer)
    sender.close()
    os._exit(0)


class _Watch:
    """Follows one worker: forwards its events, enforces the timeout, honours cancel."""

    def __init__(
        self, spec: RunSpec, on_event: EventHandler, cancel: threading.Event | None
    ) -> None:
        self.spec = spec
        self.on_event = on_event
        self.cancel = cancel
        self.phase = "starting"
        self.started = time.perf_counter()

    def follow(self, process: Any, receiver: Any) -> RunResult:
        self.started = time.perf_counter()
        deadline = self.started + self.spec.timeout_s if self.spec.timeout_s else None
        while True:
            if self.cancel is not None and self.cancel.is_set():
                _kill(process)
                return self.failed("cancelled", f"cancelled while {self.phase}")
            if deadline is not None and time.perf_counter() > deadline:
                _kill(process)
                return self.failed(
                    "timeout",
                    f"no result within the {self.spec.timeout_s:g} s timeout "
                    f"(still {self.phase}); raise timeout= if the run needs longer",
                )
            message = _receive(receiver, POLL_INTERVAL_S)
            if message is _CLOSED:
                process.join(timeout=5)
                return self.failed(*classify_exit(process.exitcode, self.phase))
            if message is not None:
                result = self._handle(message)
                if result is not None:
                    process.join(timeout=5)
                    return result

    def _handle(self, message: dict[str, Any]) -> RunResult | None:
        if message.get("event") == "result":
            result = RunResult.from_dict(message["result"])
            elapsed = time.perf_counter() - self.started
            extra = {**result.extra, "process_s": elapsed}
            return dataclasses.replace(result, extra=extra)
        if message.get("event") == "phase":
            self.phase = message["phase"]
        self.on_event(message)
        return None

    def failed(self, status: str, reason: str) -> RunResult:
        return RunResult(
            **self.spec.result_identity(),
            status=status,
            reason=reason,
            extra={"process_s": time.perf_counter() - self.started},
            created_at=_now(),
        )


_CLOSED = object()


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start workers without re-running the caller's main script in them.

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


def _receive(receiver: Any, timeout: float) -> Any:
    """The next message, None when there is none yet, _CLOSED when the worker has gone."""
    try:
        if receiver.poll(timeout):
            return receiver.recv()
    except (EOFError, OSError):
        return _CLOSED
    return None


def _kill(process: Any) -> None:
    """Kill the worker and everything in its process group; harmless if it already ended."""
    pid = process.pid
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if process.is_alive():
        process.kill()
    process.join(timeout=5)


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
