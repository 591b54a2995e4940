"""What a pipeline runner's device threads share on any backend: the mailbox that carries
activations and gradients between them, the abort that ends their waits when one fails, and the
record of each task and step that the timeline (`timeline.py`) reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ...pipeline.tasks import MailboxKey, Pass, Task

MAILBOX_POLL_S = 0.5


class PipelineAborted(Exception):
    """Another device failed; this one stops waiting for messages that will never come."""


class Mailbox:
    """Messages between device threads, keyed by what they carry, the receiving stage and the
    micro-batch (`MailboxKey`, a task's `Message.key`)."""

    def __init__(self) -> None:
        self._messages: dict[MailboxKey, Any] = {}
        self._condition = threading.Condition()
        self._aborted = False

    def put(self, key: MailboxKey, value: Any) -> None:
        with self._condition:
            self._messages[key] = value
            self._condition.notify_all()

    def get(self, key: MailboxKey) -> Any:
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
    kind: Pass
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
    steps_in_call: int = 1  # steps run in the same call as this one (`ScheduleRunner.steps`)
    # A step returned once dispatched: each stage with what to wait for its update, and the
    # loss's parts (each on its stage's device), waited for and summed by
    # `ScheduleRunner.settle`; None once settled.
    pending: tuple[list[tuple[Any, Any]], list[Any]] | None = None


def step_report(
    results: Sequence[Any], stages: int, loss: float, serial: bool, duration_s: float
) -> StepReport:
    """The step's report from each device thread's (its `records`, `activations_in`,
    `gradients_in`, `peak_live` and `update_s`), the loss already summed."""
    activations_in = [sum(r.activations_in.get(s, 0) for r in results) for s in range(stages)]
    gradients_in = [sum(r.gradients_in.get(s, 0) for r in results) for s in range(stages)]
    return StepReport(
        loss=loss,
        tasks=[record for r in results for record in r.records],
        # Cut c lies between stages c and c+1: activations go down it, their gradients back.
        cut_bytes=[activations_in[c + 1] + gradients_in[c] for c in range(stages - 1)],
        peak_live=[max(r.peak_live.get(s, 0) for r in results) for s in range(stages)],
        update_s=[r.update_s for r in results],
        serial=serial,
        duration_s=duration_s,
    )


def activations_for(task: Task, stages: int, xs: Sequence[Any], mailbox: Mailbox) -> Any:
    """What a forward takes in: stage 0's micro-batch of the data, or what the stage before it
    sent (waited for)."""
    received = task.received(stages)
    return xs[task.micro_batch] if received is None else mailbox.get(received.key)


def gradients_for(task: Task, stages: int, mailbox: Mailbox) -> Any:
    """What a backward takes in: nothing on the last stage (its loss starts the backward), or
    the gradients the stage after it sent (waited for)."""
    received = task.received(stages)
    return {} if received is None else mailbox.get(received.key)


def send(task: Task, stages: int, mailbox: Mailbox, value: Any) -> None:
    """What `task` hands to the next stage (a forward) or the one before (a backward), if any."""
    sent = task.sent(stages)
    if sent is not None:
        mailbox.put(sent.key, value)


def note_forward(step: Any, task: Any, held: int, size: int) -> None:
    """A forward's bookkeeping in the device's report of the step: the micro-batches its stage
    holds now (`held`, from a forward until its backward, or its W when split), and the bytes it
    received across its cut (`size`)."""
    step.peak_live[task.stage] = max(step.peak_live.get(task.stage, 0), held)
    step.activations_in[task.stage] = step.activations_in.get(task.stage, 0) + size


def held_by(stage: int, *kept: dict[tuple[int, int], Any]) -> int:
    """The micro-batches of `stage` whose activations a device keeps, by (stage, micro-batch)."""
    return sum(1 for waiting in kept for s, _ in waiting if s == stage)


def fused_backward(
    task: Task,
    stages: int,
    step: Any,
    mailbox: Mailbox,
    sent_back: Any,
    since: float | None,
    device: int,
) -> None:
    """A backward that ran in its forward's call (`pipeline/fused_calls.py`): its gradients sent
    upstream, and, in a timed step (`since`: the step's start), its record, ending where the
    call ended. `step` is the device's report of the step, its `records` and `gradients_in`."""
    step.gradients_in[task.stage] = step.gradients_in.get(task.stage, 0)
    send(task, stages, mailbox, sent_back)
    if since is not None:
        now = time.perf_counter() - since
        step.records.append(
            TaskRecord(task.stage, task.kind, task.micro_batch, now, now, device=device)
        )


def drain(run: Generator, mailbox: Mailbox | None) -> Any:
    """Run a device's remaining tasks; its result is the generator's return value. A failure
    aborts the mailbox: the other devices would otherwise wait for this one forever."""
    try:
        while True:
            next(run)
    except StopIteration as finished:
        return finished.value
    except BaseException:
        if mailbox is not None:
            mailbox.abort()
        raise


def collect(futures: Sequence[Future]) -> tuple[list[Any], list[BaseException]]:
    """Every device thread's result, and the errors of those that failed."""
    results, errors = [], []
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as error:  # noqa: BLE001 - raised by `raise_cause`, the cause first
            errors.append(error)
    return results, errors


def raise_cause(errors: Sequence[BaseException]) -> None:
    """Raise the failure that started it all, not another device's `PipelineAborted`."""
    if errors:
        raise next((e for e in errors if not isinstance(e, PipelineAborted)), errors[0])
