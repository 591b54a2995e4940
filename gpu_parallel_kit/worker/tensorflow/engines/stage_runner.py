"""Run one global batch through the stages, each device in its own thread, in schedule order.

Every device thread executes exactly its list of tasks from `schedules.build_schedule` (the
tasks of the one stage it holds, or of several for an interleaved schedule): a forward
task receives the tensors that cross into its stage (copied onto this stage's device: the
transfer across the cut; several for a residual stream or a long skip), keeps its gradient tape,
and sends on what crosses out; a backward task receives the gradients of what it sent, computes
the gradients of what it received and of its variables, accumulates the variables' share and
sends the received tensors' gradients back (a tensor passed through adds its gradient
unchanged). After its last task a stage applies the accumulated gradients once: one update per
global batch, as single-device training does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from ....pipeline.fused_calls import fused_calls
from ....pipeline.schedules import Task, device_of, execution_order, splits_backward
from ...pipeline.runner_messages import (
    Mailbox,
    StepReport,
    TaskRecord,
    activations_for,
    collect,
    drain,
    fused_backward,
    held_by,
    note_forward,
    raise_cause,
    step_report,
)
from .stage_tasks import make_tasks
from .stages import Stage


def stage_tasks(
    stages: list[Stage], loss_fn: Any, micro_batches: int, recompute: bool, split: bool
) -> list[Any]:
    """Each stage's tasks; loss_fn, (targets, the last stage's outputs by name) -> the
    micro-batch's mean loss, goes to the last stage."""
    last = len(stages) - 1
    return [
        make_tasks(s, loss_fn if s.index == last else None, micro_batches, recompute, split)
        for s in stages
    ]


class PipelineRunner:
    """Executes the schedule for each global batch; one thread per device, living as long as the
    runner. A device runs its list of tasks, which name the model stages it holds (several for
    an interleaved schedule)."""

    def __init__(
        self,
        stages: list[Stage],
        schedule: tuple[tuple[Task, ...], ...],
        micro_batches: int,
        loss_fn: Callable[[Any, dict[str, tf.Tensor]], tf.Tensor],
        feed: Callable[[Any], dict[str, tf.Tensor]],
        recompute: bool = False,
        tasks: list[Any] | None = None,
    ) -> None:
        self.stages = stages
        self.schedule = schedule
        self.devices = len(schedule)
        self.micro_batches = micro_batches
        self.feed = feed  # a micro-batch of x -> the model's input tensors by name
        # Tasks already made (and traced) by the micro-batch curve are reused, told the M.
        self.tasks = tasks or stage_tasks(
            stages, loss_fn, micro_batches, recompute, splits_backward(schedule)
        )
        for task in self.tasks:
            task.set_micro_batches(micro_batches)
        self._pool = ThreadPoolExecutor(max_workers=self.devices, thread_name_prefix="gpk-device")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def step(
        self, x: tf.Tensor, y: tf.Tensor, timed: bool = False, serial: bool = False
    ) -> StepReport:
        """One global batch. `serial` runs the same tasks one at a time in one thread: slower,
        but each task's time is then its own, not shared with other devices on the same cores."""
        mailbox = Mailbox()
        clock = time.perf_counter()
        xs = [self.feed(part) for part in split(x, self.micro_batches)]
        ys = split(y, self.micro_batches)
        runs = [
            self._device_tasks(device, xs, ys, mailbox, clock, timed or serial)
            for device in range(self.devices)
        ]
        results = self._serially(runs) if serial else self._concurrently(runs, mailbox)
        duration = time.perf_counter() - clock
        loss = float(sum(r.loss for r in results))
        return step_report(results, len(self.stages), loss, serial, duration)

    def _concurrently(self, runs: list[Generator], mailbox: Mailbox) -> list[_DeviceStep]:
        results, errors = collect([self._pool.submit(drain, run, mailbox) for run in runs])
        raise_cause(errors)
        return results

    def _serially(self, runs: list[Generator]) -> list[_DeviceStep]:
        for task in execution_order(self.schedule, len(self.stages)):
            next(runs[device_of(task.stage, self.devices)])
        return [drain(run, None) for run in runs]

    def _device_tasks(
        self, device: int, xs, ys, mailbox: Mailbox, clock: float, timed: bool
    ) -> Generator[None, None, _DeviceStep]:
        """One device's step, pausing after each task."""
        last = len(self.stages) - 1
        held = [s for s in self.stages if device_of(s.index, self.devices) == device]
        for stage in held:
            with tf.device(stage.device):
                self.tasks[stage.index].begin_step()
        saved: dict[tuple[int, int], Any] = {}  # per (stage, micro-batch): for its backward
        later: dict[tuple[int, int], Any] = {}  # per (stage, micro-batch): for its W task
        result = _DeviceStep()
        fused = fused_calls(self.schedule[device], last) if self.tasks[last].fuses else {}
        applied = False  # by a fused call, with the device's last backward
        sent_back: dict[str, tf.Tensor] = {}  # by a fused call: what its backward sends upstream
        for position, task in enumerate(self.schedule[device]):
            stage, tasks = self.stages[task.stage], self.tasks[task.stage]
            key = (task.stage, task.micro_batch)
            moved = called = 0.0
            size = 0
            if position - 1 in fused:  # this backward ran in the forward's call
                fused_backward(task, result, mailbox, sent_back, clock if timed else None, device)
                yield
                continue
            if position in fused:  # the last stage's forward and its backward in one call
                incoming = activations_for(task, xs, mailbox)
                start = time.perf_counter()
                with tf.device(stage.device):
                    moved = time.perf_counter()
                    received = {name: tf.identity(value) for name, value in incoming.items()}
                    moved = time.perf_counter() - moved
                    called = time.perf_counter()
                    applied = fused[position].with_update
                    sent_back, out = tasks.forward_backward(received, ys[task.micro_batch], applied)
                    result.loss += float(out)  # waits for the call, as the forward's does
                    called = time.perf_counter() - called
                size = _nbytes(incoming) if task.stage else 0
                note_forward(result, task, held_by(task.stage, saved, later) + 1, size)
            elif task.kind == "F":
                incoming = activations_for(task, xs, mailbox)
                start = time.perf_counter()  # a task's time starts once its input is here
                with tf.device(stage.device):
                    moved = time.perf_counter()
                    # The copy across the cut onto this device.
                    received = {name: tf.identity(value) for name, value in incoming.items()}
                    moved = time.perf_counter() - moved
                    called = time.perf_counter()
                    out, saved[key] = tasks.forward(received, ys[task.micro_batch])
                    called = time.perf_counter() - called
                size = _nbytes(incoming) if task.stage else 0
                note_forward(result, task, held_by(task.stage, saved, later), size)
                if task.stage == last:
                    result.loss += float(out)
                else:
                    mailbox.put(("act", task.stage + 1, task.micro_batch), out)
            elif task.kind == "B":
                kept = saved.pop(key)
                incoming = (
                    None
                    if task.stage == last
                    else mailbox.get(("grad", task.stage, task.micro_batch))
                )
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
                    grads, for_weight = tasks.backward(kept, upstream, ys[task.micro_batch])
                    called = time.perf_counter() - called
                if for_weight is not None:
                    later[key] = for_weight
                size = 0 if incoming is None else _nbytes(incoming)
                result.gradients_in[task.stage] = result.gradients_in.get(task.stage, 0) + size
                if task.stage > 0:
                    mailbox.put(("grad", task.stage - 1, task.micro_batch), grads)
            else:  # W: the weight gradient of a split backward, nothing to receive or send
                start = time.perf_counter()
                with tf.device(stage.device):
                    called = time.perf_counter()
                    tasks.weight(later.pop(key))
                    called = time.perf_counter() - called
            if timed:
                if task.kind == "F" and task.stage != last:
                    waited = time.perf_counter()
                    _wait_for(out)  # the work may still run on a GPU: it is the call's
                    called += time.perf_counter() - waited
                result.records.append(
                    TaskRecord(
                        task.stage,
                        task.kind,
                        task.micro_batch,
                        start - clock,
                        time.perf_counter() - clock,
                        moved,
                        size,
                        called,
                        device,
                    )
                )
            yield
        start = time.perf_counter()
        for stage in held if not applied else ():
            with tf.device(stage.device):
                self.tasks[stage.index].apply()
        # The losses the earlier stages' layers added: the last stage's loss holds only its own.
        result.loss += sum(float(own) for s in held for own in self.tasks[s.index].added_losses)
        if timed and held and held[-1].variables:
            _wait_for(held[-1].variables[0].value)
        result.update_s = time.perf_counter() - start
        return result


@dataclass
class _DeviceStep:
    """What one device's thread reports of a step."""

    loss: float = 0.0  # its stages' share of the step's loss
    records: list[TaskRecord] = field(default_factory=list)
    activations_in: dict[int, int] = field(default_factory=dict)  # bytes received, per stage
    gradients_in: dict[int, int] = field(default_factory=dict)  # gradient bytes, per stage
    peak_live: dict[int, int] = field(default_factory=dict)  # micro-batches held, per stage
    update_s: float = 0.0  # its stages' optimizer updates


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
