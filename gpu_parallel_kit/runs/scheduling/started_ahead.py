"""The processes of a comparison beyond the run in hand: the next run's, started while the last
run measures apart; the first rounds, started at once to prepare side by side; and those that
wait to train their configuration's next round (`runs/scheduling/resident_rounds.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from multiprocessing.connection import wait
from typing import Any

from ...backends import backend_record
from ..description.run_spec import RunSpec
from ..processes.child_process import ROUND_WORD, WorkerNotStarted, end_of, start_child, stop_child

# Processes that prepare together each take a share of the gate first thing (milliseconds after
# the fork); a process not sharing by then has died or hangs, and its turn will say so.
SHARE_TIMEOUT_S = 30.0


def entry_for(spec: RunSpec) -> str:
    """The worker entry point of a run on this machine."""
    record = backend_record(spec.backend)
    if record.cluster_entry is not None and spec.several_processes:
        return record.cluster_entry
    return record.run_entry


class StartedAhead:
    """A comparison's processes beyond the run in hand: the next run's, started while the last
    run measures apart, the first rounds preparing side by side, and the processes that train
    their configuration's next round.

    Only a run with a training gate (`runs/scheduling/training_gate.py`) is started ahead: it waits
    at the gate before training, so its step times never overlap another run's work. One run at most
    is started ahead; a first round prepared beside the others, or a process waiting for its
    configuration's next round, is parked (`parking`) and given the word when its turn comes.
    `close` stops every process never taken (the comparison ended, was cancelled or failed).
    """

    def __init__(self, together: Sequence[RunSpec] = ()) -> None:
        self._spec: RunSpec | None = None
        self._started: tuple[Any, Any] | None = None
        self._parked: dict[str, tuple[Any, Any]] = {}
        self._together = list(together)  # first rounds to start at once, at the first take

    def _prepare_together(self) -> None:
        """Start the first rounds that prepare side by side
        (`runs/scheduling/resident_rounds.prepared_together`), parked until their turns, and wait
        until each holds its share of the gate (its first message), so that none can be overtaken by
        a run that passes the gate."""
        together, self._together = self._together, []
        for spec in together:
            try:
                started = start_child(
                    entry_for(spec), spec, name=f"gpk-{spec.run_id}", backend=spec.backend
                )
            except WorkerNotStarted:
                continue  # started on its own at its turn, which says why if it fails again
            self._parked[parking(spec)] = started
        for process, receiver in self._parked.values():
            with end_of(process) as ended:
                if wait([receiver, *ended], SHARE_TIMEOUT_S) and receiver.poll(0):
                    with contextlib.suppress(EOFError, OSError):
                        receiver.recv()  # {"event": "sharing"}

    def park(self, spec: RunSpec, process: Any, receiver: Any) -> bool:
        """Keep `spec`'s process, which waits to train its configuration's next round."""
        if spec.resident is None or not process.is_alive():
            return False
        self._parked[spec.resident[0]] = (process, receiver)
        return True

    def start(self, spec: RunSpec) -> bool:
        """Start `spec`'s process now; whether it was (a run without a gate never is, nor a
        later round, which its configuration's process trains, or a fresh one at its turn)."""
        later_round = spec.resident is not None and spec.resident[1] > 0
        parked = parking(spec) in self._parked
        if spec.gate is None or self._started is not None or later_round or parked:
            return False
        try:
            self._started = start_child(
                entry_for(spec), spec, name=f"gpk-{spec.run_id}", backend=spec.backend
            )
        except WorkerNotStarted:
            return False  # started again when its turn comes, which then says why if it fails
        self._spec = spec
        return True

    def waiting_for(self, spec: RunSpec) -> bool:
        """Whether a process of `spec`'s configuration waits to train it."""
        if self._together:
            self._prepare_together()
        return parking(spec) in self._parked

    def take(self, spec: RunSpec) -> tuple[Any, Any] | None:
        """`spec`'s process if one is ready for it: its configuration's, told to train this
        round, or the one started ahead; None when it must be started now."""
        if self._together:
            self._prepare_together()
        if parking(spec) in self._parked:
            process, receiver = self._parked.pop(parking(spec))
            # A process that has ended may have left its row in the pipe (a failed set-up); one
            # that left nothing starts afresh once followed (`run_isolated`).
            with contextlib.suppress(OSError):
                receiver.send(ROUND_WORD)
            return process, receiver
        if self._spec is None or self._spec.run_id != spec.run_id:
            return None
        started, self._spec, self._started = self._started, None, None
        return started

    def close(self) -> None:
        waiting = list(self._parked.values())
        if self._started is not None:
            waiting.append(self._started)
        for process, receiver in waiting:
            stop_child(process)
            receiver.close()
        self._spec = self._started = None
        self._parked.clear()


def parking(spec: RunSpec) -> str:
    """What a waiting process is parked under: a resident run's configuration (its first
    round's run id), which its later rounds ask for, or else the run's own id."""
    return spec.resident[0] if spec.resident is not None else spec.run_id
