"""A multi-worker run on a named cluster, seen from the process that starts it (a notebook, `gpk`).

The starting process listens on the cluster's coordinator address; `gpk worker --cluster FILE
--index i`, started on every host by ssh, Slurm or Kubernetes, connects to it, proves it knows the
cluster's key, and receives the run (spec and data files). The workers train with
MultiWorkerMirroredStrategy among themselves, stream the chief's progress back, and send their
results; the row lands in the starting process's table and run log like any other. Connections
use the standard library's authenticated `multiprocessing.connection`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection, Listener, wait
from typing import Any

from ..runs.description.run_spec import RunSpec
from ..runs.processes.child_process import RunInterrupted
from ..runs.results.run_result import RunResult
from .config import ClusterSpec
from .reports import WorkerReports
from .transfer import pack_job

POLL_S = 0.1


def run_on_cluster(
    spec: RunSpec,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Hand `spec` to the cluster's workers and return the run's row; never raises for a worker."""
    cluster: ClusterSpec = spec.cluster
    on_event = on_event or (lambda event: None)
    started = time.perf_counter()
    deadline = started + spec.timeout_s if spec.timeout_s else None
    try:
        # multiprocessing takes a TCP address only as an exact tuple, not a subclass of one
        listener = Listener(tuple(cluster.coordinator_address), authkey=cluster.key.encode())
    except OSError as error:
        return _row(
            spec,
            "failed",
            f"could not listen on the coordinator address {cluster.coordinator} "
            f'({error.strerror or error}); name a free port of this host as "coordinator"',
        )
    joined: dict[int, Connection] = {}
    closing = threading.Event()
    accepting = threading.Thread(
        target=_accept_workers,
        args=(listener, len(cluster.workers), joined, closing),
        daemon=True,
    )
    accepting.start()
    phase = f"waiting for {len(cluster.workers)} workers to join at {cluster.coordinator}"
    on_event({"event": "phase", "phase": phase})
    try:
        seen = 0
        while len(joined) < len(cluster.workers):
            if len(joined) != seen:
                seen = len(joined)
                on_event({"event": "phase", "phase": f"{phase}: {seen} joined"})
            stop = _stopped(spec, cancel, deadline, phase)
            if stop is not None:
                missing = [i for i in range(len(cluster.workers)) if i not in joined]
                hint = "; ".join(
                    f"start `gpk worker --cluster {cluster.source or 'FILE'} --index {i}` on "
                    f"{cluster.workers[i].rsplit(':', 1)[0]}"
                    for i in missing
                )
                return _row(spec, *stop, hint=f"workers {missing} never joined: {hint}")
            time.sleep(POLL_S)
        job = pack_job(spec)
        for connection in joined.values():
            connection.send({"job": job})
        reports = WorkerReports(len(cluster.workers), spec.result_identity(), on_event)
        stop = _follow(spec, joined, reports, cancel, deadline)
    except KeyboardInterrupt:
        _abort(joined, list(joined), "cancelled by Ctrl-C")
        raise RunInterrupted(_row(spec, "cancelled", "cancelled by Ctrl-C")) from None
    finally:
        closing.set()
        with contextlib.suppress(OSError):
            listener.close()
        for connection in list(joined.values()):
            with contextlib.suppress(OSError):
                connection.close()
    if stop is not None:
        return _row(spec, *stop)
    row = reports.row()
    extra = {**row.extra, "workers_addresses": list(cluster.workers)}
    extra["process_s"] = time.perf_counter() - started
    return dataclasses.replace(row, extra=extra)


def _accept_workers(
    listener: Listener, count: int, joined: dict[int, Connection], closing: threading.Event
) -> None:
    """Accept connections until every index has joined; wrong keys and strays are turned away."""
    while len(joined) < count and not closing.is_set():
        try:
            connection = listener.accept()
        except Exception:  # noqa: BLE001 - a wrong key, a stray client, or the listener closed
            continue
        try:
            hello = connection.recv() if connection.poll(10) else {}
        except (EOFError, OSError):
            continue
        index = hello.get("index") if isinstance(hello, dict) else None
        if not isinstance(index, int) or not 0 <= index < count or index in joined:
            with contextlib.suppress(OSError):
                connection.send({"refused": f"index {index!r} is taken or outside 0..{count - 1}"})
                connection.close()
            continue
        joined[index] = connection


def _follow(
    spec: RunSpec,
    joined: dict[int, Connection],
    reports: WorkerReports,
    cancel: threading.Event | None,
    deadline: float | None,
) -> tuple[str, str] | None:
    """Collect every worker's report; (status, reason) when cancel or the timeout stopped it."""
    while reports.pending:
        stop = _stopped(spec, cancel, deadline, reports.phases[0])
        if stop is not None:
            _abort(joined, reports.pending, stop[1])
            return stop
        pending = {joined[i]: i for i in reports.pending}
        for connection in wait(list(pending), timeout=POLL_S):
            index = pending[connection]
            try:
                message = connection.recv()
            except (EOFError, OSError):
                phase = reports.phases[index]
                reports.ended(index, "crashed", f"the worker's connection closed while {phase}")
            else:
                reports.handle(index, message)
        _abort(joined, reports.stragglers(), "another worker failed")
    return None


def _abort(joined: dict[int, Connection], indices: Iterable[int], why: str) -> None:
    for index in indices:
        with contextlib.suppress(OSError):
            joined[index].send({"abort": why})


def _stopped(
    spec: RunSpec, cancel: threading.Event | None, deadline: float | None, phase: str
) -> tuple[str, str] | None:
    if cancel is not None and cancel.is_set():
        return "cancelled", f"cancelled while {phase}"
    if deadline is not None and time.perf_counter() > deadline:
        return (
            "timeout",
            f"no result within the {spec.timeout_s:g} s timeout (still {phase}); "
            "raise timeout= if the run needs longer",
        )
    return None


def _row(spec: RunSpec, status: str, reason: str, hint: str = "") -> RunResult:
    return RunResult(
        **spec.result_identity(), status=status, reason=f"{reason}; {hint}" if hint else reason
    )
