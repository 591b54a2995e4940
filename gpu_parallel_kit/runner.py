"""Run one spec in a fresh worker process and turn whatever happens into a RunResult.

A fresh process per run (docs/ARCHITECTURE.md, "one process per run") lets each run choose its
own logical devices, keeps collectives of different sizes apart, gives clean memory figures, and
isolates faults: a builder that raises, an out-of-memory error, a segfault, a hang or a Ctrl-C
ends only that run. The runner dispatches (one worker, a local multi-worker launcher, or a named
cluster's coordinator), follows the child's events, and enforces the timeout and cancel.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

from .cluster.coordinator import run_on_cluster
from .cluster.slurm.steps import run_on_slurm
from .runs.description.communication_reuse import reuse_fields, reusing
from .runs.description.run_spec import RunSpec
from .runs.processes.child_process import (
    RunInterrupted,
    WorkerNotStarted,
    end_of,
    start_child,
    stop_child,
)
from .runs.processes.configuration_lines import RoundsSoFar
from .runs.processes.failure_reasons import classify_exit, refused_for_every_run
from .runs.results.below_noise import settle_communication
from .runs.results.run_result import RunResult
from .runs.scheduling import training_gate
from .runs.scheduling.comparison_rounds import new_run_id
from .runs.scheduling.measuring_until_known import (
    Measuring,
    MeasuringRule,
    next_round_wanted,
    rounds_so_far,
    row_fields,
)
from .runs.scheduling.resident_rounds import prepared_together, round_spec
from .runs.scheduling.started_ahead import StartedAhead, entry_for

# A cancel Event has no file descriptor to wait on, so while one is given the wait wakes this
# often to look at it: well under the 2 s a cancel may take.
CANCEL_POLL_S = 0.1

EventHandler = Callable[[dict[str, Any]], None]


def run_isolated(
    spec: RunSpec,
    on_event: EventHandler | None = None,
    cancel: threading.Event | None = None,
    *,
    ahead: StartedAhead | None = None,
    then: RunSpec | None = None,
) -> RunResult:
    """Run `spec` in its own process; always returns a result, whatever the worker did.

    Ctrl-C kills the worker's whole process group and raises RunInterrupted carrying the
    cancelled row, so callers keep what finished before and stop what comes after.

    With `ahead`, the run takes its process from there if it was started ahead, and once it
    has trained, starts `then` (the caller's next run) ahead, beside its own after-training work.
    """
    if spec.slurm is not None:
        return run_on_slurm(spec, on_event, cancel)
    if spec.several_processes and spec.cluster is not None:
        return run_on_cluster(spec, on_event, cancel)
    watch = _Watch(spec, on_event or (lambda event: None), cancel)
    # Only a run that holds the gate once trained may have the next start beside it: a run
    # without one (several processes, GPUs) keeps the machine to itself until it ends.
    if ahead is not None and then is not None and spec.gate is not None:
        watch.on_trained = lambda: ahead.start(then)
    resumed = False
    try:
        resumed = ahead is not None and ahead.waiting_for(spec)
        started = ahead.take(spec) if ahead is not None else None
        process, receiver = started or start_child(
            entry_for(spec), spec, name=f"gpk-{spec.run_id}", backend=spec.backend
        )
    except KeyboardInterrupt:
        raise RunInterrupted(watch.failed("cancelled", "cancelled by Ctrl-C")) from None
    except WorkerNotStarted as error:
        return watch.failed("crashed", str(error))
    # A process that trains this configuration's next round too waits for it
    # (runs/scheduling/resident_rounds.py).
    watch.keep_alive = ahead is not None and spec.more_rounds_here
    parked = False
    try:
        result = watch.follow(process, receiver)
        if watch.keep_alive and result.ok:
            parked = ahead.park(spec, process, receiver)
    except KeyboardInterrupt:
        stop_child(process)
        raise RunInterrupted(watch.failed("cancelled", "cancelled by Ctrl-C")) from None
    finally:
        if not parked:
            receiver.close()
    if not parked:
        stop_child(process)
    if resumed and not watch.heard and result.status == "crashed":
        # The process kept for this round died while it waited (the OOM killer picks large
        # processes): nothing of this round ran, so it starts in a fresh one.
        return run_isolated(spec, on_event, cancel, ahead=ahead, then=then)
    return result


Execute = Callable[
    [RunSpec, "StartedAhead", "RunSpec | None", "tuple[int, int, str] | None"], RunResult
]


def run_grid(
    specs: list[RunSpec],
    rounds: int,
    execute: Execute,
    cancel: threading.Event | None,
    rule: MeasuringRule | None = None,
    measured: Callable[[RoundsSoFar], None] | None = None,
) -> list[list[RunResult]]:
    """Each spec's rows, its rounds run interleaved (A, B, C, A, B, C, …), every run after the
    first started ahead while the one before it measures (`StartedAhead`); then, under an
    adaptive `rule`, more interleaved rounds of the configurations whose step is not yet known
    (`runs/scheduling/measuring_until_known.py`), each row marked with what ended its
    configuration's measuring. A Ctrl-C keeps the cancelled run's row and stops, as does a run
    refused for what every run shares (`runs/processes/failure_reasons.refused_for_every_run`);
    configurations that never ran get no rows.

    `execute(spec, ahead=, upcoming=, round_of=)` runs one spec; `round_of` is (round from 0,
    rounds, the configuration's first run id), None with one round. A later round reports the
    communication its configuration measured before (`runs/description/communication_reuse.py`)
    instead of measuring it again, and where it may, is trained by the process of the round before
    (`runs/scheduling/resident_rounds.py`), which `ahead` keeps between rounds. After each round,
    `measured` is told what its configuration's rounds measured so far (its progress line).
    """
    rule = rule or MeasuringRule(adaptive=False)
    most = rule.most_rounds(rounds)
    queue: list[tuple[int, int, RunSpec]] = []
    done: list[list[RunResult]] = [[] for _ in specs]
    seconds: list[list[float]] = [[] for _ in specs]

    def add_round(turns: dict[int, int]) -> None:
        for index, turn in turns.items():
            spec = specs[index]
            run_id = spec.run_id if turn == 0 else new_run_id()
            queue.append((index, turn, round_spec(spec, turn, most, run_id)))

    for turn in range(rounds):
        add_round(dict.fromkeys(range(len(specs)), turn))
    fixed: dict[int, RunSpec] = {}

    def ready(position: int) -> RunSpec:
        """The spec at `position`, with what its configuration measured so far; fixed when
        first asked for, so a run started ahead is the run that is then executed."""
        if position not in fixed:
            index, _, spec = queue[position]
            fixed[position] = reusing(spec, done[index])
        return fixed[position]

    def measuring(index: int) -> Measuring:
        return Measuring(done[index], seconds[index])

    ahead = StartedAhead(prepared_together([spec for _, turn, spec in queue if turn == 0]))
    position = 0
    stopped = False
    try:
        while not stopped:
            if position == len(queue):
                wanted = [i for i in range(len(specs)) if next_round_wanted(rule, measuring(i))]
                if not wanted:
                    break
                add_round({i: len(done[i]) for i in wanted})
            index, turn, _ = queue[position]
            spec = ready(position)
            upcoming = ready(position + 1) if position + 1 < len(queue) else None
            shown = max(rounds, turn + 1)
            round_of = (turn, shown, specs[index].run_id) if shown > 1 else None
            began = time.perf_counter()
            try:
                row = execute(spec, ahead=ahead, upcoming=upcoming, round_of=round_of)
                done[index].append(row)
                seconds[index].append(_round_seconds(row, turn, time.perf_counter() - began))
                if measured is not None:
                    measured(rounds_so_far(rule, measuring(index), specs[index].run_id, rounds))
                stopped = refused_for_every_run(row)  # the data against the model: none would train
            except RunInterrupted as interrupted:
                done[index].append(interrupted.result)
                print(
                    f"Comparison cancelled: {position} of {len(queue)} runs finished; "
                    "their rows are kept.",
                    file=sys.stderr,
                )
                return done
            stopped = stopped or (cancel is not None and cancel.is_set())
            position += 1
    finally:
        ahead.close()  # a run started ahead but never reached, and rounds never asked for
    if stopped:
        return done
    return [
        [_with_fields(row, row_fields(rule, measuring(i))) for row in rows]
        for i, rows in enumerate(done)
    ]


def _round_seconds(row: RunResult, turn: int, elapsed: float) -> float:
    """What a round cost the comparison: a first round its training (its set-up, beside the
    others', is paid once whatever the rounds), a later one all of it."""
    if turn == 0 and row.wall_time_s:
        return float(row.wall_time_s)
    return elapsed


def _with_fields(row: RunResult, fields: dict[str, Any]) -> RunResult:
    return dataclasses.replace(row, extra={**row.extra, **fields})


def with_gate(spec: RunSpec) -> RunSpec:
    """`spec` with the caller's training gate, where its after-training work may overlap the
    next run's start: one process on devices other than GPUs
    (`runs/scheduling/training_gate.py`)."""
    if spec.several_processes or not training_gate.overlaps(spec.devices.kind):
        return spec
    return dataclasses.replace(spec, gate=training_gate.gate_path())


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
        self.on_trained: Callable[[], bool] | None = None
        self.overlapped = False  # the next run started beside this one's after-training work
        self.keep_alive = False  # the process trains another round after reporting this one
        self.heard = False  # the process has said anything since it was given this run
        self.deadline: float | None = None  # set when following begins

    def follow(self, process: Any, receiver: Any) -> RunResult:
        self.started = time.perf_counter()
        self.deadline = self._deadline_from(self.started)
        with end_of(process) as ended:
            return self._follow([receiver, *ended], process, receiver)

    def _deadline_from(self, now: float) -> float | None:
        return now + self.spec.timeout_s if self.spec.timeout_s else None

    def _follow(self, waitables: list[Any], process: Any, receiver: Any) -> RunResult:
        # The pipe wakes the wait with each event; the child's end wakes it when the child dies,
        # even while a process the child started still holds the pipe open.
        while True:
            deadline = self.deadline
            if self.cancel is not None and self.cancel.is_set():
                stop_child(process)
                return self.failed("cancelled", f"cancelled while {self.phase}")
            if deadline is not None and time.perf_counter() > deadline:
                stop_child(process)
                return self.failed(
                    "timeout",
                    f"no result within the {self.spec.timeout_s:g} s timeout "
                    f"(still {self.phase}); raise timeout= if the run needs longer",
                )
            if not wait(waitables, self._wait_s(deadline)):
                continue
            message = _receive(receiver)
            if message is _CLOSED or message is None:  # None: woken by the child's end alone
                process.join(timeout=5)
                return self.failed(*classify_exit(process.exitcode, self.phase))
            result = self._handle(message)
            if result is not None:
                if not self.keep_alive:
                    process.join(timeout=5)
                return result

    def _wait_s(self, deadline: float | None) -> float | None:
        """How long the next wait may block: until the deadline, or the next look at cancel."""
        left = None if deadline is None else max(0.0, deadline - time.perf_counter())
        if self.cancel is None:
            return left
        return CANCEL_POLL_S if left is None else min(left, CANCEL_POLL_S)

    def _handle(self, message: dict[str, Any]) -> RunResult | None:
        self.heard = True
        if message.get("event") == "result":
            result = settle_communication(RunResult.from_dict(message["result"]))
            if "trained_in_process_of" in result.extra:  # a later round, in an earlier one's
                result = self._as_this_round(result)
            elapsed = time.perf_counter() - self.started
            extra = {**result.extra, "process_s": elapsed}
            if self.overlapped:
                extra["next_run_started_beside"] = True
                measured_here = "comm_measured_in" not in extra and extra.get("comm_measured", True)
                if "comm_method" in extra and measured_here:
                    extra["comm_method"] += (
                        "; taken while the comparison's next run was starting beside it"
                    )
            return dataclasses.replace(result, extra=extra)
        if message.get("event") == "trained":  # the run holds the gate: the next may start
            if self.on_trained is not None:
                self.overlapped = self.on_trained()
                self.on_trained = None
            return None
        if message.get("event") == "turn":
            # A run prepared beside others has waited at the gate for the last of them
            # (runs/scheduling/resident_rounds.py): its timeout counts from its turn, as a run's own
            # time.
            self.deadline = self._deadline_from(time.perf_counter())
            return None
        if message.get("event") == "phase":
            self.phase = message["phase"]
        self.on_event(message)
        return None

    def _as_this_round(self, result: RunResult) -> RunResult:
        """A row the process of an earlier round reported (`runs/scheduling/resident_rounds.py`),
        under this round's run id; what it lends of that round's communication worded as the caller
        recorded it (the caller knows whether that round measured beside another's start)."""
        extra = dict(result.extra)
        if self.spec.comm_from is not None and "comm_measured_in" in extra:
            extra.update(reuse_fields(self.spec.comm_from))
        return dataclasses.replace(result, run_id=self.spec.run_id, created_at=_now(), extra=extra)

    def failed(self, status: str, reason: str) -> RunResult:
        return RunResult(
            **self.spec.result_identity(),
            status=status,
            reason=reason,
            extra={"process_s": time.perf_counter() - self.started},
            created_at=_now(),
        )


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


_CLOSED = object()


def _receive(receiver: Any) -> Any:
    """The next message, None when there is none, _CLOSED when the worker's end has closed."""
    try:
        if receiver.poll(0):
            return receiver.recv()
    except (EOFError, OSError):
        return _CLOSED
    return None
