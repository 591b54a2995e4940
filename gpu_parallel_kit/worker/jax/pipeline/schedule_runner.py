"""Run one global batch through the JAX stages in schedule order, one thread per device.

Every device thread executes exactly its list of tasks from `pipeline.schedules.build_schedule`,
the lists the TensorFlow engine runs: a forward takes what crosses into its stage, moves it onto
the stage's device (`jax.device_put`: the transfer across the cut) and sends on what crosses
out; a backward takes the gradients of what its stage sent, moves them likewise (onto the
stage's sub-mesh, split over its data axis, where it has one) and sends the
gradients of what it received back upstream; a W task (zb-h1) adds the weights' half. After its
last task each stage applies its summed gradients once. JAX dispatches asynchronously, so an
untimed step only orders the work; a timed one waits for each task's results to stamp its end.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from ....pipeline.fused_calls import fused_calls
from ....pipeline.schedules import Schedule, device_of, execution_order, splits_backward
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
from .stage_functions import StageFunctions


@dataclass
class _DeviceStep:
    """What one device's thread reports of a step."""

    # The last stage's objectives, and those of earlier stages whose layers add losses.
    losses: list[Any] = field(default_factory=list)
    records: list[TaskRecord] = field(default_factory=list)
    activations_in: dict[int, int] = field(default_factory=dict)
    gradients_in: dict[int, int] = field(default_factory=dict)
    peak_live: dict[int, int] = field(default_factory=dict)
    update_s: float = 0.0


class ScheduleRunner:
    """Executes the schedule for each global batch on the stages; one thread per device, living
    as long as the runner.

    Args:
        stages: every model stage, in the model's order (several per device when interleaved).
        schedule: each device's tasks (`pipeline.schedules.build_schedule`).
        micro_batches: M, the parts each global batch is split into.
        feed: a micro-batch of x -> the model's input tensors by name.
        crossings: over several processes, the cuts between them
            (`process_crossing.ProcessCrossings`); this process runs its own devices' tasks.
    """

    def __init__(
        self,
        stages: list[StageFunctions],
        schedule: Schedule,
        micro_batches: int,
        feed: Any,
        crossings: Any = None,
    ) -> None:
        self.stages = stages
        self.schedule = schedule
        self.devices = len(schedule)
        self.micro_batches = micro_batches
        self.feed = feed
        self.crossings = crossings
        self.local = crossings.local_devices if crossings else list(range(self.devices))
        self.split = splits_backward(schedule)
        self._pool = ThreadPoolExecutor(max_workers=self.devices, thread_name_prefix="gpk-device")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def step(self, x: Any, y: Any, timed: bool = False, serial: bool = False) -> StepReport:
        """One global batch, its updates finished when it returns. `serial` runs the tasks one
        at a time in this thread, each waited for: its time is then its own."""
        mailbox = Mailbox()
        clock = time.perf_counter()
        xs = [self.feed(part) for part in split(x, self.micro_batches)]
        ys = split(y, self.micro_batches)
        runs = {
            device: self._device_tasks(device, xs, ys, mailbox, clock, timed or serial)
            for device in self.local
        }
        results = self._serially(runs, mailbox) if serial else self._concurrently(runs, mailbox)
        jax.block_until_ready([s.trainable for s in self.stages])
        duration = time.perf_counter() - clock
        loss = float(sum(float(loss) for r in results for loss in r.losses))
        if self.crossings is not None:
            loss = self.crossings.total_loss(loss)
        return step_report(results, len(self.stages), loss, serial, duration)

    def _concurrently(self, runs: dict[int, Generator], mailbox: Mailbox) -> list[_DeviceStep]:
        crossing = None if self.crossings is None else self.crossings.start(mailbox)
        futures = [self._pool.submit(drain, run, mailbox) for run in runs.values()]
        results, errors = collect(futures)
        if crossing is not None:
            try:
                self.crossings.finish(crossing)
            except BaseException as error:  # noqa: BLE001 - the cause of the devices' abort
                errors.insert(0, error)
        raise_cause(errors)
        return results

    def _serially(self, runs: dict[int, Generator], mailbox: Mailbox) -> list[_DeviceStep]:
        for task in execution_order(self.schedule, len(self.stages)):
            device = device_of(task.stage, self.devices)
            if device in runs:
                next(runs[device])
            if self.crossings is not None:  # what the task sends to another process, now
                self.crossings.cross_after(task, mailbox)
        return [drain(run, None) for run in runs.values()]

    def _device_tasks(
        self, device: int, xs, ys, mailbox: Mailbox, clock: float, timed: bool
    ) -> Generator[None, None, _DeviceStep]:
        """One device's step, pausing after each task."""
        last = len(self.stages) - 1
        held = [s for s in self.stages if device_of(s.index, self.devices) == device]
        saved: dict[tuple[int, int], Any] = {}  # per (stage, micro-batch): for its backward
        later: dict[tuple[int, int], Any] = {}  # per (stage, micro-batch): for its W task
        result = _DeviceStep()
        whole = "B" if self.split else "BW"
        fused = fused_calls(self.schedule[device], last)
        applied = False  # by a fused call, with the device's last backward
        sent_back: dict[str, Any] = {}  # by a fused call: what its backward sends upstream
        for position, task in enumerate(self.schedule[device]):
            stage = self.stages[task.stage]
            key = (task.stage, task.micro_batch)
            moved = called = 0.0
            size = 0
            out: Any = None
            if position - 1 in fused:  # this backward ran in the forward's call
                fused_backward(task, result, mailbox, sent_back, clock if timed else None, device)
                yield
                continue
            if position in fused:  # the last stage's forward and its backward in one call
                incoming = activations_for(task, xs, mailbox)
                start = time.perf_counter()
                received = stage.placement.put_batch(incoming)
                y = stage.placement.put_batch(ys[task.micro_batch])
                if timed:
                    jax.block_until_ready(received)
                moved = time.perf_counter() - start
                called = time.perf_counter()
                applied = fused[position].with_update
                sent_back, out = stage.forward_backward(received, y, applied)
                returned = _returned(timed, (sent_back, out))
                result.losses.append(out)
                size = nbytes(incoming) if task.stage else 0
                note_forward(result, task, held_by(task.stage, saved, later) + 1, size)
            elif task.kind == "F":
                incoming = activations_for(task, xs, mailbox)
                start = time.perf_counter()  # a task's time starts once its input is here
                received = stage.placement.put_batch(incoming)  # the copy across the cut
                y = (
                    None
                    if stage.loss_fn is None
                    else stage.placement.put_batch(ys[task.micro_batch])
                )
                if timed:
                    jax.block_until_ready(received)
                moved = time.perf_counter() - start
                called = time.perf_counter()
                out, objective, saved[key] = stage.forward(received, y)
                returned = _returned(timed, out)
                size = nbytes(incoming) if task.stage else 0
                note_forward(result, task, held_by(task.stage, saved, later), size)
                if task.stage == last:
                    result.losses.append(objective)
                    out = objective
                else:
                    if stage.adds_losses:  # the model's loss holds every stage's added losses
                        result.losses.append(objective)
                    mailbox.put(("act", task.stage + 1, task.micro_batch), out)
            elif task.kind == "B":
                kept = saved.pop(key)
                incoming = (
                    {}
                    if task.stage == last
                    else mailbox.get(("grad", task.stage, task.micro_batch))
                )
                start = time.perf_counter()
                upstream = stage.placement.put_batch(incoming)
                if timed:
                    jax.block_until_ready(upstream)
                moved = time.perf_counter() - start
                called = time.perf_counter()
                out, for_weight = stage.backward(kept, upstream, whole)
                returned = _returned(timed, out)
                if self.split:
                    later[key] = for_weight
                size = nbytes(incoming)
                result.gradients_in[task.stage] = result.gradients_in.get(task.stage, 0) + size
                if task.stage > 0:
                    mailbox.put(("grad", task.stage - 1, task.micro_batch), out)
                else:
                    out = stage.accumulated
            else:  # W: the weights' half of a split backward, nothing to receive or send
                start = called = time.perf_counter()
                kept, upstream = later.pop(key)
                stage.backward(kept, upstream, "W")
                out = stage.accumulated
                returned = _returned(timed, out)
            if timed:
                jax.block_until_ready(out)  # the task ends when its work does
                now = time.perf_counter()
                result.records.append(
                    TaskRecord(
                        task.stage,
                        task.kind,
                        task.micro_batch,
                        start - clock,
                        now - clock,
                        moved,
                        size,
                        returned - called,
                        device,
                    )
                )
            yield
        start = time.perf_counter()
        for stage in held if not applied else ():
            stage.apply()
        if timed:
            jax.block_until_ready([s.trainable for s in held])
        result.update_s = time.perf_counter() - start
        return result


def split(batch: Any, parts: int) -> list[Any]:
    """A batch (an array, or a tuple or dict of them) as `parts` micro-batches."""
    flat = [np.split(np.asarray(a), parts) for a in jax.tree.leaves(batch)]
    structure = jax.tree.structure(batch)
    return [jax.tree.unflatten(structure, [pieces[i] for pieces in flat]) for i in range(parts)]


def nbytes(tensors: dict[str, Any]) -> int:
    return sum(int(np.prod(t.shape)) * t.dtype.itemsize for t in tensors.values())


def _returned(timed: bool, out: Any) -> float:
    """When a stage's call returned its results: the call's clock stops here, before the
    engine's bookkeeping (the mailbox, the counts), as TensorFlow's engine stops it, so both
    backends' per-task overhead (task - call - copy) holds the same work."""
    if timed:
        jax.block_until_ready(out)
    return time.perf_counter()
