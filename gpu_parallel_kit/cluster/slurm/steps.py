"""A run as a Slurm job step inside the kit's allocation, seen from the process that starts it.

`srun --jobid=J --ntasks=W --nodes=N --label` starts the run's W processes (one task each) on the
nodes it needs, with their GPUs bound by Slurm; each is `cluster/slurm/task.py`, which reads the
run on its stdin and trains it. Their events and results come back on srun's stdout, labelled
with each task's number, so this process needs no inbound connection and no shared folder. What
the tasks report becomes one row as for local workers (`cluster/reports.py`); a task or step that
Slurm ends, an allocation that is cancelled or reaches its time limit, and a node marked down
become that row's one sentence, and the step is cancelled before the row is returned.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ...errors import GpkError
from ...runs.description.run_spec import RunSpec
from ...runs.processes.child_process import RunInterrupted
from ...runs.results.run_result import RunResult
from ..reports import WorkerReports
from ..transfer import pack_job
from .commands import GONE, cancel, job_state, step_ids
from .task import EventLines, encode_job

POLL_S = 0.2
END_WAIT_S = 60.0  # after the first task ends, srun waits this long for the others (--wait)
STOP_WAIT_S = 30.0  # a cancelled step's srun gets this long to leave before it is killed
TASK_STDERR_KEPT = 200  # the tasks' last stderr lines a row keeps (`extra["task_stderr"]`)
_LABELLED = re.compile(r"^\s*(\d+): ?(.*)$")
# What srun and slurmstepd say when Slurm ends a step, as the row's sentence: (pattern, sentence)
_ENDINGS = (
    (
        re.compile(r"(?:JOB|STEP) (\d+)\S* ON \S+ CANCELLED AT \S+ DUE TO TIME LIMIT"),
        "timeout",
        "the Slurm allocation {0} reached its time limit",
    ),
    (
        re.compile(r"(?:JOB|STEP) (\d+)\S* ON \S+ CANCELLED AT \S+ DUE TO NODE FAILURE"),
        "crashed",
        "a node of the Slurm allocation {0} failed or was marked down",
    ),
    (re.compile(r"[Nn]ode failure on (\S+)"), "crashed", "the node {0} failed or was marked down"),
    (
        re.compile(r"JOB (\d+) ON \S+ CANCELLED AT"),
        "cancelled",
        "the Slurm allocation {0} was cancelled",
    ),
    (
        re.compile(r"STEP (\d+\.\d+) ON \S+ CANCELLED AT"),
        "cancelled",
        "the Slurm job step {0} was cancelled (scancel)",
    ),
    (
        re.compile(r"tasks? ([\d,-]+): Killed"),
        "crashed",
        "task {0} was killed (SIGKILL), and Slurm ended the step",
    ),
    (
        re.compile(r"tasks? ([\d,-]+): Exited with exit code (\d+)"),
        "crashed",
        "task {0} failed (exit code {1}; its traceback is above), and Slurm ended the step",
    ),
    (
        re.compile(r"tasks? ([\d,-]+): (Terminated|Segmentation fault|Aborted|Bus error)"),
        "crashed",
        "task {0} ended by a signal ({1}), and Slurm ended the step",
    ),
)


def run_on_slurm(
    spec: RunSpec,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    cancel_event: threading.Event | None = None,
) -> RunResult:
    """Run `spec` as one job step of its Slurm allocation and return its row; never raises for
    what Slurm or a task did. Ctrl-C cancels the step and raises RunInterrupted with the row."""
    on_event = on_event or (lambda event: None)
    allocation = spec.slurm
    tasks = spec.workers if spec.several_processes else 1
    try:
        nodes = allocation.nodes_for(tasks)
    except ValueError as error:
        return _row(spec, 1, "failed", str(error))
    state = job_state(allocation.job_id)
    if state.state != "RUNNING":
        return _row(spec, nodes, "failed", _allocation_gone(allocation.job_id, state))
    step = _Step(spec, allocation.job_id, tasks, nodes)
    on_event(
        {"event": "phase", "phase": f"starting a Slurm step of {tasks} tasks on {nodes} nodes"}
    )
    try:
        row = step.follow(on_event, cancel_event)
    except KeyboardInterrupt:
        step.stop()
        raise RunInterrupted(_row(spec, nodes, "cancelled", "cancelled by Ctrl-C")) from None
    finally:
        step.stop()
    return row


class _Step:
    """One srun and what its tasks said."""

    def __init__(self, spec: RunSpec, job_id: str, tasks: int, nodes: int) -> None:
        self.spec = spec
        self.job_id = job_id
        self.tasks = tasks
        self.nodes = nodes
        self.name = f"gpk-{spec.run_id}"
        self.said: list[str] = []  # srun's and slurmstepd's own lines
        # The tasks' own stderr (a task's traceback after its peer was killed, the frameworks'
        # warnings): kept on the row for debugging, not printed into the user's cell.
        self.task_stderr: collections.deque[str] = collections.deque(maxlen=TASK_STDERR_KEPT)
        self.lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
        self.events = [EventLines() for _ in range(tasks)]
        member = dataclasses.replace(
            spec, gate=None, resident=None, prepares_together=False, timeout_s=None
        )
        command = [
            "srun",
            f"--jobid={job_id}",
            f"--ntasks={tasks}",
            f"--nodes={nodes}",
            f"--job-name={self.name}",
            "--label",
            "--kill-on-bad-exit=1",
            f"--wait={END_WAIT_S:g}",
            "--quiet",
        ]
        if spec.devices.kind == "gpu" or spec.slurm.request.gpus_per_node:
            # Slurm binds each task its GPUs; the task plans its devices on them
            command.append(f"--gpus-per-task={spec.devices.count}")
        command += [sys.executable, "-m", __package__ + ".task"]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # Ctrl-C is the kernel's; the step is cancelled through Slurm
        )
        for stream, kind in ((self.process.stdout, "out"), (self.process.stderr, "err")):
            threading.Thread(target=self._read, args=(stream, kind), daemon=True).start()
        try:
            self.process.stdin.write(encode_job(pack_job(member)).decode())
            self.process.stdin.close()
        except OSError:
            pass  # srun refused at once; its words are on stderr

    def _read(self, stream: Any, kind: str) -> None:
        for line in stream:
            self.lines.put((kind, line.rstrip("\n")))
        self.lines.put((kind, None))

    def follow(
        self, on_event: Callable[[dict[str, Any]], None], cancel_event: threading.Event | None
    ) -> RunResult:
        reports = WorkerReports(self.tasks, self.spec.result_identity(), on_event)
        deadline = time.monotonic() + self.spec.timeout_s if self.spec.timeout_s else None
        closed = 0
        while closed < 2 and reports.pending:
            if cancel_event is not None and cancel_event.is_set():
                self.stop()
                return self._ended(reports, "cancelled", f"cancelled while {reports.phases[0]}")
            if deadline is not None and time.monotonic() > deadline:
                self.stop()
                reason = (
                    f"no result within the {self.spec.timeout_s:g} s timeout (still "
                    f"{reports.phases[0]}); raise timeout= if the run needs longer"
                )
                return self._ended(reports, "timeout", reason)
            try:
                kind, line = self.lines.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if line is None:
                closed += 1
            elif kind == "out":
                self._out(line, reports)
            else:
                self._err(line)
        if reports.pending:  # srun ended before every task reported
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(STOP_WAIT_S)
            status, reason = self._why()
            return self._ended(reports, status, reason)
        row = reports.row()
        extra = {**row.extra, "slurm_job": self.job_id, "slurm_nodes": self.nodes}
        return dataclasses.replace(row, nodes=self.nodes, extra={**extra, **self._kept_stderr()})

    def _out(self, line: str, reports: WorkerReports) -> None:
        labelled = _LABELLED.match(line)
        index, text = (int(labelled.group(1)), labelled.group(2)) if labelled else (0, line)
        if not 0 <= index < self.tasks:
            print(line, flush=True)
            return
        ours, event = self.events[index].read(text)
        if not ours:
            print(f"[task {index}] {text}" if labelled else text, flush=True)
        elif event is not None and index in reports.pending:
            reports.handle(index, event)

    def _err(self, line: str) -> None:
        text = _LABELLED.sub(r"\2", line)
        if text.startswith(("srun:", "slurmstepd")) or "error:" in text[:40]:
            self.said.append(text)
            return
        self.task_stderr.append(line)

    def _why(self) -> tuple[str, str]:
        """Why the step ended before its tasks reported, in Slurm's words made one sentence."""
        said = "\n".join(self.said)
        ending = step_ending(self.said)
        if ending is not None:
            status, sentence, step_only = ending
            if step_only and job_state(self.job_id).state != "RUNNING":
                # slurmstepd names the step even when the whole allocation was cancelled
                return "cancelled", f"the Slurm allocation {self.job_id} was cancelled"
            return status, sentence
        state = job_state(self.job_id)
        if state.state != "RUNNING":
            return "failed", _allocation_gone(self.job_id, state)
        if any("Unable to create step" in line for line in self.said):
            from .commands import refusal

            return "failed", str(refusal(said, f"the job step of {self.tasks} tasks"))
        code = self.process.returncode
        last = self.said[-1] if self.said else f"srun exited with code {code}"
        return "crashed", f"the Slurm step ended before every task reported ({last})"

    def _ended(self, reports: WorkerReports, status: str, reason: str) -> RunResult:
        for index in reports.pending:
            reports.ended(index, status, reason)
        row = reports.row()
        if self.tasks == 1:  # one process: no worker to name
            row = dataclasses.replace(row, reason=reason)
        extra = {**row.extra, "slurm_job": self.job_id, **self._kept_stderr()}
        return dataclasses.replace(row, nodes=self.nodes, extra=extra)

    def _kept_stderr(self) -> dict[str, str]:
        return {"task_stderr": "\n".join(self.task_stderr)} if self.task_stderr else {}

    def stop(self) -> None:
        """Cancel the step through Slurm (so nothing of it is left), then end srun."""
        if self.process.poll() is not None:
            return
        for step in step_ids(self.job_id, self.name):
            cancel(step)
        try:
            self.process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def step_ending(said: list[str]) -> tuple[str, str, bool] | None:
    """Why Slurm ended a step, from what srun and slurmstepd said: (status, sentence, whether
    it names the step's cancel only), or None when they said none of `_ENDINGS`.

    What ended the whole allocation comes first; of a step's own endings, the earliest said is
    the cause (a killed task makes Slurm cancel the step; a cancelled step kills its tasks).

    >>> step_ending(["srun: error: localhost: task 1: Killed"])
    ('crashed', 'task 1 was killed (SIGKILL), and Slurm ended the step', False)
    """
    text = "\n".join(said)
    found = [(p.search(text), status, sentence) for p, status, sentence in _ENDINGS]
    found = [(match, status, sentence) for match, status, sentence in found if match]
    if not found:
        return None
    whole = [f for f in found if not f[0].re.pattern.startswith(("STEP", "tasks?"))]
    match, status, sentence = (whole or sorted(found, key=lambda f: f[0].start()))[0]
    return status, sentence.format(*match.groups()), match.re.pattern.startswith("STEP")


def devices_on_nodes(allocation: Any, max_virtual: int | None, backend: str | None) -> Any:
    """Every node's devices (one task per node lists its own), one table with a `node` column."""
    import pandas as pd

    state = job_state(allocation.job_id)
    if state.state != "RUNNING":
        raise GpkError(_allocation_gone(allocation.job_id, state))
    nodes = max(len(allocation.nodes), 1)
    command = [
        "srun",
        f"--jobid={allocation.job_id}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        "--label",
        "--quiet",
        sys.executable,
        "-m",
        __package__ + ".task",
        "--devices",
        str(max_virtual or 0),
        backend or "",
    ]
    answer = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    readers: dict[int, EventLines] = {}
    frames = []
    for line in answer.stdout.splitlines():
        labelled = _LABELLED.match(line)
        if not labelled:
            continue
        index, text = int(labelled.group(1)), labelled.group(2)
        _, event = readers.setdefault(index, EventLines()).read(text)
        if event is not None:
            frames.append(pd.DataFrame(event["rows"]).assign(node=event["node"]))
    if not frames:
        said = (answer.stderr.strip().splitlines() or ["no output"])[-1]
        raise GpkError(
            f"the Slurm allocation {allocation.job_id} could not list its devices ({said}); "
            "check that the kit is installed on its nodes"
        )
    return pd.concat(frames, ignore_index=True)


# Why Slurm ended a job, in the words of a row: squeue's reason of an ending job.
_ENDED_BECAUSE = {
    "TimeLimit": "it reached its time limit",
    "NodeDown": "a node went down",
    "NodeFail": "a node failed",
}


def _allocation_gone(job_id: str, state: Any) -> str:
    ending = state.state in (GONE, "COMPLETING", "COMPLETED", "CANCELLED", "TIMEOUT", "FAILED")
    if ending:
        because = _ENDED_BECAUSE.get(state.reason, "cancelled, or past its time limit")
        return (
            f"the Slurm allocation {job_id} has ended ({because}); ask for a new one with "
            "gpk.SlurmCluster(...)"
        )
    return (
        f"the Slurm allocation {job_id} is {state.state.lower()} ({state.reason}), not running; "
        "ask for a new one with gpk.SlurmCluster(...)"
    )


def _row(spec: RunSpec, nodes: int, status: str, reason: str) -> RunResult:
    return RunResult(**spec.result_identity(), nodes=nodes, status=status, reason=reason)
