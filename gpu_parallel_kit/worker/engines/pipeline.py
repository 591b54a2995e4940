"""Run one global batch through the stages, each stage in its own thread, in schedule order.

Every stage thread executes exactly its list of tasks from `schedules.build_schedule`: a forward
task receives the tensors that cross into its stage (copied onto this stage's device: the
transfer across the cut; several for a residual stream or a long skip), keeps its gradient tape,
and sends on what crosses out; a backward task receives the gradients of what it sent, computes
the gradients of what it received and of its variables, accumulates the variables' share and
sends the received tensors' gradients back (a tensor passed through adds its gradient
unchanged). After its last task a stage applies the accumulated gradients once: one update per
global batch, as single-device training does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from ...pipeline.schedules import Task, execution_order
from .stage_tasks import make_tasks
from .stages import Stage

MAILBOX_POLL_S = 0.5


class PipelineAborted(Exception):
    """Another stage failed; this one stops waiting for messages that will never come."""


class Mailbox:
    """Messages between stage threads, keyed by (kind, receiving stage, micro-batch)."""

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
    transfer_s: float = 0.0
    bytes_in: int = 0
    call_s: float = 0.0  # inside the stage's forward or backward: the task's own work


@dataclass
class StepReport:
    """One step's loss, tasks (when timed), bytes over each cut, and peak live micro-batches."""

    loss: float
    tasks: list[TaskRecord] = field(default_factory=list)
    cut_bytes: list[int] = field(default_factory=list)  # per cut: activations + their gradients
    peak_live: list[int] = field(default_factory=list)  # per stage: micro-batches held at once
    update_s: list[float] = field(default_factory=list)  # per stage: its optimizer update
    serial: bool = False  # the tasks ran one at a time (their times are uncontended)
    duration_s: float = 0.0  # the whole step: splitting the batch, every task, every update


class PipelineRunner:
    """Executes the schedule for each global batch; threads live as long as the runner."""

    def __init__(
        self,
        stages: list[Stage],
        schedule: tuple[tuple[Task, ...], ...],
        micro_batches: int,
        loss_fn: Callable[[Any, dict[str, tf.Tensor]], tf.Tensor],
        feed: Callable[[Any], dict[str, tf.Tensor]],
        recompute: bool = False,
    ) -> None:
        self.stages = stages
        self.schedule = schedule
        self.micro_batches = micro_batches
        self.feed = feed  # a micro-batch of x -> the model's input tensors by name
        last = len(stages) - 1
        # loss_fn: (targets, the last stage's outputs by name) -> the micro-batch's mean loss.
        self.tasks = [
            make_tasks(stage, loss_fn if stage.index == last else None, micro_batches, recompute)
            for stage in stages
        ]
        self._pool = ThreadPoolExecutor(max_workers=len(stages), thread_name_prefix="gpk-stage")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def step(
        self, x: tf.Tensor, y: tf.Tensor, timed: bool = False, serial: bool = False
    ) -> StepReport:
        """One global batch. `serial` runs the same tasks one at a time in one thread: slower,
        but each task's time is then its own, not shared with other stages on the same cores."""
        mailbox = Mailbox()
        clock = time.perf_counter()
        xs = [self.feed(part) for part in split(x, self.micro_batches)]
        ys = split(y, self.micro_batches)
        stage_runs = [
            self._stage_tasks(stage, xs, ys, mailbox, clock, timed or serial)
            for stage in self.stages
        ]
        results = self._serially(stage_runs) if serial else self._concurrently(stage_runs, mailbox)
        losses, records, activations_in, gradients_in, live, updates = zip(*results, strict=True)
        duration = time.perf_counter() - clock
        return StepReport(
            loss=float(sum(losses)),
            tasks=[record for stage_records in records for record in stage_records],
            # Cut c lies between stages c and c+1: activations go down it, their gradients back.
            cut_bytes=[activations_in[c + 1] + gradients_in[c] for c in range(len(live) - 1)],
            peak_live=list(live),
            update_s=list(updates),
            serial=serial,
            duration_s=duration,
        )

    def _concurrently(self, stage_runs: list[Generator], mailbox: Mailbox) -> list[tuple]:
        futures = [self._pool.submit(_drain, run, mailbox) for run in stage_runs]
        results, errors = [], []
        for future in futures:
            try:
                results.append(future.result())
            except BaseException as error:  # noqa: BLE001 - re-raised below, the real cause first
                errors.append(error)
        if errors:
            raise next((e for e in errors if not isinstance(e, PipelineAborted)), errors[0])
        return results

    def _serially(self, stage_runs: list[Generator]) -> list[tuple]:
        for task in execution_order(self.schedule):
            next(stage_runs[task.stage])
        return [_drain(run, None) for run in stage_runs]

    def _stage_tasks(
        self, stage: Stage, xs, ys, mailbox: Mailbox, clock: float, timed: bool
    ) -> Generator[None, None, tuple]:
        """One stage's step, pausing after each task; returns (loss part, task records, bytes in,
        gradient bytes in, peak number of micro-batches whose activations were held at once)."""
        last = stage.index == len(self.stages) - 1
        tasks = self.tasks[stage.index]
        with tf.device(stage.device):
            tasks.begin_step()
        saved: dict[int, Any] = {}  # per micro-batch: what its backward needs
        records: list[TaskRecord] = []
        loss_total, activations_in, gradients_in, peak_live = 0.0, 0, 0, 0
        for task in self.schedule[stage.index]:
            if task.kind == "F":
                incoming = (
                    xs[task.micro_batch]
                    if stage.index == 0
                    else mailbox.get(("act", stage.index, task.micro_batch))
                )
                start = time.perf_counter()  # a task's time starts once its input is here
                with tf.device(stage.device):
                    moved = time.perf_counter()
                    # The copy across the cut onto this device.
                    received = {name: tf.identity(value) for name, value in incoming.items()}
                    moved = time.perf_counter() - moved
                    called = time.perf_counter()
                    out, saved[task.micro_batch] = tasks.forward(received, ys[task.micro_batch])
                    called = time.perf_counter() - called
                peak_live = max(peak_live, len(saved))
                size = _nbytes(incoming) if stage.index else 0
                activations_in += size
                if last:
                    loss_total += float(out)
                else:
                    mailbox.put(("act", stage.index + 1, task.micro_batch), out)
            else:
                kept = saved.pop(task.micro_batch)
                incoming = None if last else mailbox.get(("grad", stage.index, task.micro_batch))
                start = time.perf_counter()
                with tf.device(stage.device):
                    moved = time.perf_counter()
                    upstream = (
                        {}
                        if incoming is None
                        else {name: tf.identity(value) for name, value in incoming.items()}
                    )
                    moved = time.perf_counter() - moved
                    called = time.perf_counter()
                    grads = tasks.backward(kept, upstream, ys[task.micro_batch])
                    called = time.perf_counter() - called
                size = 0 if incoming is None else _nbytes(incoming)
                gradients_in += size
                if stage.index > 0:
                    mailbox.put(("grad", stage.index - 1, task.micro_batch), grads)
            if timed:
                if task.kind == "F" and not last:
                    waited = time.perf_counter()
                    _wait_for(out)  # the work may still run on a GPU: it is the call's
                    called += time.perf_counter() - waited
                records.append(
                    TaskRecord(
                        stage.index,
                        task.kind,
                        task.micro_batch,
                        start - clock,
                        time.perf_counter() - clock,
                        moved,
                        size,
                        called,
                    )
                )
            yield
        start = time.perf_counter()
        with tf.device(stage.device):
            tasks.apply()
        if timed:
            _wait_for(stage.variables[0].value if stage.variables else None)
        update_s = time.perf_counter() - start
        return loss_total, records, activations_in, gradients_in, peak_live, update_s


def _drain(stage_run: Generator, mailbox: Mailbox | None) -> tuple:
    """Run a stage's remaining tasks; its result is the generator's return value."""
    try:
        while True:
            next(stage_run)
    except StopIteration as finished:
        return finished.value
    except BaseException:
        if mailbox is not None:
            mailbox.abort()  # the other stages would otherwise wait for this one forever
        raise


def split(batch: Any, parts: int) -> list[Any]:
    """A batch (a tensor, or a tuple or dict of them) as `parts` micro-batches."""
    flat = [tf.split(tensor, parts) for tensor in tf.nest.flatten(batch)]
    return [tf.nest.pack_sequence_as(batch, [pieces[i] for pieces in flat]) for i in range(parts)]


def _nbytes(tensors: dict[str, tf.Tensor]) -> int:
    return sum(int(t.shape.num_elements() or 0) * t.dtype.size for t in tensors.values())


def _wait_for(tensor) -> None:
    """On GPUs ops return before they finish; a timed task must end when its work does."""
    if isinstance(tensor, dict):
        tensor = next(iter(tensor.values()), None)
    if isinstance(tensor, list):
        tensor = tensor[0] if tensor else None
    if tensor is not None and "GPU" in tensor.device:
        tensor[..., :1].numpy()
