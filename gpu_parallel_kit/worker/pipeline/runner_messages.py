"""What a pipeline runner's device threads share on any backend: the mailbox that carries
activations and gradients between them, the abort that ends their waits when one fails, and the
record of each task and step that the timeline (`timeline.py`) reads."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

MAILBOX_POLL_S = 0.5


class PipelineAborted(Exception):
    """Another device failed; this one stops waiting for messages that will never come."""


class Mailbox:
    """Messages between device threads, keyed by (kind, receiving stage, micro-batch)."""

    def __init__(self) -> None:
        self._messages: dict[tuple, Any] = {}
        self._condition = threading.Condition()
        self._aborted = False

    def put(self, key: tuple, value: Any) -> None:
        with self._condition:
            self._messages[key] = value
            self._condition.notify_all()

    def get(self, key: tuple) -> Any:
        with self._condition:
            while key not in self._messages:
                if self._aborted:
                    raise PipelineAborted()
                self._condition.wait(MAILBOX_POLL_S)
            return self._messages.pop(key)

    def abort(self) -> None:
        with self._condition:
            self._aborted = True
            self._condition.notify_all()


@dataclass
class TaskRecord:
    """What one task did: when (seconds from the step's start) and how many bytes it moved."""

    stage: int
    kind: str
    micro_batch: int
    start: float
    end: float
    transfer_s: float = 0.0  # the copy across the cut that began the task
    bytes_in: int = 0
    call_s: float = 0.0  # inside the stage's forward or backward pass: the task's own work
    device: int | None = None  # the device that ran it; None: the stage's index


@dataclass
class StepReport:
    """One step's loss, tasks (when timed), bytes over each cut, and peak live micro-batches."""

    loss: float
    tasks: list[TaskRecord] = field(default_factory=list)
    cut_bytes: list[int] = field(default_factory=list)  # per cut: activations + their gradients
    peak_live: list[int] = field(default_factory=list)  # per stage: micro-batches held at once
    update_s: list[float] = field(default_factory=list)  # per device: its stages' updates
    serial: bool = False  # the tasks ran one at a time (their times are uncontended)
    duration_s: float = 0.0  # the whole step: splitting the batch, every task, every update
