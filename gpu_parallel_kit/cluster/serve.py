"""`gpk worker`: the one program started on each host of a named cluster.

It joins the coordinator (the notebook or `gpk` that starts runs), receives each run, trains it as
worker `index` in a fresh process of the run's backend (its own devices, its own collectives;
TensorFlow's MultiWorkerMirroredStrategy, or one `jax.distributed` mesh), relays that process's
events and result, and kills it when the coordinator aborts the run or goes away. Between runs it
reconnects, so one `gpk worker` per host serves a whole comparison.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, wait
from pathlib import Path

from ..errors import GpkError
from ..runs.description.device_choice import discover_physical_devices
from ..runs.description.run_spec import RunSpec
from ..runs.processes.child_process import start_child, stop_child
from ..runs.processes.entry_points import served_entry
from ..runs.processes.failure_reasons import classify_exit
from ..runs.results.run_result import RunResult
from .config import ClusterSpec
from .transfer import unpack_job
from .worker_devices import plan_on_this_host

RETRY_S = 1.0


def serve(
    cluster: ClusterSpec,
    index: int,
    join_timeout_s: float = 600.0,
    once: bool = False,
    say: Callable[[str], None] = print,
) -> int:
    """Serve runs as worker `index` until stopped (or after one run with `once`); exit code."""
    if not 0 <= index < len(cluster.workers):
        raise GpkError(
            f"--index {index} is outside the cluster's {len(cluster.workers)} workers; "
            f"use 0 to {len(cluster.workers) - 1}"
        )
    while True:
        connection = _join(cluster, index, join_timeout_s, say)
        if connection is None:
            say(f"no coordinator answered at {cluster.coordinator} within {join_timeout_s:g} s")
            return 1
        say(f"worker {index} joined {cluster.coordinator}")
        try:
            _serve_connection(connection, cluster, index, say)
        finally:
            with contextlib.suppress(OSError):
                connection.close()
        if once:
            return 0
        time.sleep(RETRY_S)  # the coordinator closes after each run; the next one opens anew


def _join(
    cluster: ClusterSpec, index: int, timeout_s: float, say: Callable[[str], None]
) -> Connection | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            # multiprocessing takes a TCP address only as an exact tuple, not a subclass of one
            connection = Client(tuple(cluster.coordinator_address), authkey=cluster.key.encode())
        except (ConnectionRefusedError, ConnectionResetError, FileNotFoundError, EOFError):
            time.sleep(RETRY_S)
            continue
        except AuthenticationError:
            raise GpkError(
                f"the coordinator at {cluster.coordinator} refused this worker's key; set the "
                "same GPK_CLUSTER_KEY on every host and where the runs start"
            ) from None
        connection.send({"index": index})
        return connection
    return None


def _serve_connection(
    connection: Connection, cluster: ClusterSpec, index: int, say: Callable[[str], None]
) -> None:
    try:
        message = connection.recv()
    except (EOFError, OSError):
        return
    if "refused" in message:
        raise GpkError(f"the coordinator refused this worker: {message['refused']}")
    if "job" not in message:
        return
    with tempfile.TemporaryDirectory(prefix="gpk-job-") as folder:
        spec = unpack_job(message["job"], Path(folder))
        say(f"run {spec.run_id}: {spec.strategy} on {spec.workers} workers")
        try:
            spec = dataclasses.replace(
                spec,
                devices=plan_on_this_host(spec.devices, discover_physical_devices(spec.backend)),
            )
        except GpkError as error:  # e.g. more devices than this host has
            result = RunResult(**spec.result_identity(), status="failed", reason=str(error))
        else:
            result = _run_member(spec, cluster, index, connection)
    if result is not None:
        with contextlib.suppress(OSError):
            connection.send({"event": "result", "result": result.to_dict()})
        say(f"run {spec.run_id}: {result.status} {result.reason}".rstrip())


def _run_member(
    spec: RunSpec, cluster: ClusterSpec, index: int, connection: Connection
) -> RunResult | None:
    """Train in a fresh process, relaying its messages; the row when it ended without one."""
    process, receiver = start_child(
        served_entry(spec.backend), spec, cluster.workers, index, backend=spec.backend
    )
    phase = "starting"
    try:
        while True:
            ready = wait([receiver, connection], timeout=1.0)
            if connection in ready:
                try:
                    order = connection.recv()
                except (EOFError, OSError):
                    return None  # the coordinator is gone: nobody wants this run any more
                if "abort" in order:
                    return None
            if receiver in ready:
                try:
                    message = receiver.recv()
                except (EOFError, OSError):
                    process.join(timeout=5)
                    ended = classify_exit(process.exitcode, phase)
                    return RunResult(
                        **spec.result_identity(), status=ended.status, reason=ended.reason
                    )
                if message.get("event") == "phase":
                    phase = message["phase"]
                connection.send(message)
                if message.get("event") == "result":
                    process.join(timeout=5)
                    return None
    finally:
        receiver.close()
        stop_child(process)
