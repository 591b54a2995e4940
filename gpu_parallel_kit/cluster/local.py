"""A multi-worker run on this machine: W worker processes, loopback only, one row.

Runs inside the launcher process the runner starts for the run (so a timeout or Ctrl-C kills the
launcher's process group, workers included). The launcher moves into a loopback-only network
(cluster/network.py), picks free ports there, forks the workers, relays the chief's progress, and
stops every worker as soon as one fails. Workers die with the launcher (PR_SET_PDEATHSIG), so
nothing is left behind even when the launcher itself is killed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import signal
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runs.description.run_spec import RunSpec
from ..runs.processes.child_process import die_with_parent, parent_emitter
from ..runs.processes.entry_points import entry_point, member_entry
from ..runs.processes.failure_reasons import classify_exit
from ..runs.results.run_result import RunResult
from .config import local_workers
from .network import OPEN_PORTS_VARIABLE, enter_loopback_only_network, open_ports_allowed
from .reports import WorkerReports


@dataclass
class _Member:
    index: int
    pid: int  # 0 once reaped
    reader: Any


def launch_local_cluster(spec: RunSpec, connection: Any) -> None:
    """Entry point of the launcher process; always ends the process, never returns."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # the runner kills this group: the launcher and every worker

    emit = parent_emitter(connection)
    code = 0
    try:
        result = _run_cluster(spec, emit)
        emit(event="result", result=result.to_dict())
    except BaseException:  # noqa: BLE001 - the runner turns a missing result into a row
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(OSError):
            connection.close()
        os._exit(code)


def _run_cluster(spec: RunSpec, emit: Any) -> RunResult:
    try:
        isolation = enter_loopback_only_network()
    except OSError as error:
        if not open_ports_allowed():
            return RunResult(
                **spec.result_identity(),
                status="failed",
                reason=(
                    f"local workers need a loopback-only network and this system refused one "
                    f"({error.strerror or error}); the workers' servers would listen on every "
                    f"interface: set {OPEN_PORTS_VARIABLE}=1 to accept that, or name a cluster"
                ),
            )
        isolation = f"none: ports open on every interface ({error.strerror or error})"
    addresses = local_workers(spec.workers)
    emit(event="cluster", workers=list(addresses), isolation=isolation)
    emit(event="phase", phase=f"starting {spec.workers} workers")
    members = [_start_member(spec, addresses, index) for index in range(spec.workers)]
    emit(event="workers", pids=[m.pid for m in members])
    reports = WorkerReports(spec.workers, spec.result_identity(), lambda event: emit(**event))
    _follow(members, reports)
    row = reports.row()
    return dataclasses.replace(
        row, extra={**row.extra, "network_isolation": isolation, "workers_addresses": addresses}
    )


def _start_member(spec: RunSpec, addresses: tuple[str, ...], index: int) -> _Member:
    reader, writer = multiprocessing.Pipe(duplex=False)
    pid = os.fork()
    if pid == 0:  # the worker
        reader.close()
        die_with_parent()
        code = 0
        try:
            entry_point(member_entry(spec.backend))(spec, addresses, index, writer.send)
        except BaseException:  # noqa: BLE001 - the launcher sees the exit code
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    writer.close()
    return _Member(index=index, pid=pid, reader=reader)


def _follow(members: list[_Member], reports: WorkerReports) -> None:
    """Relay the chief's events, collect every worker's result, stop all on a first failure."""
    while reports.pending:
        by_reader = {members[i].reader: members[i] for i in reports.pending}
        for reader in multiprocessing.connection.wait(list(by_reader), timeout=0.2):
            member = by_reader[reader]
            try:
                message = reader.recv()
            except (EOFError, OSError):
                code = _exit_code(member)
                if not _blame_stopped(members, member, reports):
                    reports.ended(member.index, *classify_exit(code, reports.phases[member.index]))
            else:
                reports.handle(member.index, message)
            if member.index in reports.results:
                _reap(member)
        for index in reports.stragglers():
            _stop(members[index])


def _blame_stopped(members: list[_Member], ended: _Member, reports: WorkerReports) -> bool:
    """A worker that ended while a peer is stopped (SIGSTOP, a debugger) ended because of it:
    JAX's distributed service ends every worker once one stops sending heartbeats. The row then
    names the stopped one; it is killed. Whether any was found."""
    stopped = [
        m for m in members if m is not ended and m.index in reports.pending and _is_stopped(m.pid)
    ]
    for peer in stopped:
        reports.ended(
            peer.index,
            "timeout",
            f"the worker process was stopped while {reports.phases[peer.index]} and no longer "
            "answered its peers",
        )
        _stop(peer)
    if stopped:
        reports.ended(ended.index, "cancelled", "ended when a peer stopped answering")
    return bool(stopped)


def _is_stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (Linux: its state in /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] in ("T", "t")


def _exit_code(member: _Member) -> int:
    """Reap a worker that closed its pipe; its exit code, negative for a signal."""
    _, status = os.waitpid(member.pid, 0)
    member.pid = 0
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _stop(member: _Member) -> None:
    if member.pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member.pid, signal.SIGKILL)
        _reap(member)


def _reap(member: _Member) -> None:
    """Wait for a worker that has reported (it exits right after) or been killed."""
    if member.pid:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(member.pid, 0)
        member.pid = 0
