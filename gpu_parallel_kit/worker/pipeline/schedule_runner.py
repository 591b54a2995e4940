"""Run one global batch through a pipeline's stages in schedule order, one thread per device, on
either backend.

Every device thread executes exactly its list of tasks from `pipeline.schedules.build_schedule`
(the tasks of the one stage it holds, or of several when interleaved): a forward takes what
crosses into its stage (stage 0: its micro-batch of the data), has the stage copy it onto its
device (the transfer across the cut) and sends on what crosses out; a backward takes the
gradients of what its stage sent, copies them likewise and sends the gradients of what the stage
received back upstream; a weight pass adds the weights' half of a split backward. The last
stage's forward and backward run as one call where the stage offers one (`fused_calls`). After
its last task each stage applies its summed gradients once: one update per global batch, as
single-device training does. A timed step waits for each task's results to stamp its end; a
serial one runs the same tasks one at a time in one thread, so each task's time is its own.

The backends differ only in their stage objects (`stage_protocol.PipelineStage`): TensorFlow's
(`worker/tensorflow/pipeline/stage_calls.py`) and JAX's (`worker/jax/pipeline/stage_calls.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ...pipeline.fused_calls import fused_calls
from ...pipeline.schedules import Schedule, device_of, execution_order
from ...pipeline.tasks import Pass
from .runner_messages import (
    Mailbox,
    StepReport,
    TaskRecord,
    activations_for,
    collect,
    drain,
    fused_backward,
    gradients_for,
    held_by,
    note_forward,
    raise_cause,
    send,
    step_report,
)
from .stage_protocol import FusingStage, PipelineStage

TIMED_STEPS = 3  # a round's last steps, whose every task is timed for the timeline
SERIAL_REPEATS = 3  # passes with one task at a time, whose task times feed the simulated view


@dataclass
class DeviceStep:
    """What one device's thread reports of a step."""

    # The last stage's objectives, and those of earlier stages whose layers add losses.
    losses: list[Any] = field(default_factory=list)
    records: list[TaskRecord] = field(default_factory=list)
    activations_in: dict[int, int] = field(default_factory=dict)  # bytes received, per stage
    gradients_in: dict[int, int] = field(default_factory=dict)  # gradient bytes, per stage
    peak_live: dict[int, int] = field(default_factory=dict)  # micro-batches held, per stage
    update_s: float = 0.0  # its stages' optimizer updates


class CallLosses:
    """The losses of the steps one call ran (one array on the device), copied to the host once,
    when the first of them is read: a copy per step would cost each step a wait."""

    def __init__(self, values: Any) -> None:
        self._values = values
        self._host: np.ndarray | None = None

    def step(self, index: int) -> _StepLoss:
        """Step `index`'s loss, as a value `float()` reads."""
        return _StepLoss(self, index)

    def read(self, index: int) -> float:
        if self._host is None:
            self._host = np.asarray(self._values)
        return float(self._host[index])


@dataclass(frozen=True)
class _StepLoss:
    losses: CallLosses
    index: int

    def __float__(self) -> float:
        return self.losses.read(self.index)


class ScheduleRunner:
    """Executes the schedule for each global batch on the stages; one thread per device, living
    as long as the runner.

    Args:
        stages: every model stage, in the model's order (several per device when interleaved).
        schedule: each device's tasks (`pipeline.schedules.build_schedule`).
        micro_batches: M, the parts each global batch is split into.
        feed: a micro-batch of x -> the model's input tensors by name.
        split: (a batch, M) -> its M micro-batches, on the backend's arrays.
        crossings: over several processes, the cuts between them (JAX's
            `process_crossing.ProcessCrossings`); this process runs its own devices' tasks.
    """

    def __init__(
        self,
        stages: list[PipelineStage],
        schedule: Schedule,
        micro_batches: int,
        feed: Callable[[Any], dict[str, Any]],
        split: Callable[[Any, int], list[Any]],
        crossings: Any = None,
    ) -> None:
        self.stages = stages
        self.schedule = schedule
        self.devices = len(schedule)
        self.micro_batches = micro_batches
        self.feed = feed
        self.split = split
        self.crossings = crossings
        self.local = crossings.local_devices if crossings else list(range(self.devices))
        self._pool = ThreadPoolExecutor(max_workers=self.devices, thread_name_prefix="gpk-device")
        self._reader: tuple[Callable, Callable] | None = None  # `steps`: (take, its reader)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    @property
    def steps_together(self) -> bool:
        """Whether several steps can run in one call: one stage holding the whole model, one
        micro-batch, all in this process (`steps`)."""
        alone = len(self.stages) == 1 and self.micro_batches == 1 and self.crossings is None
        return alone and self.stages[0].fuses

    @property
    def runs_ahead(self) -> bool:
        """Whether a step returns before its work is done, so the next can be dispatched while
        it runs (every stage's `runs_ahead`)."""
        return all(stage.runs_ahead for stage in self.stages)

    def steps(self, take: Callable[[], tuple[Any, Any]], count: int) -> list[StepReport]:
        """`count` whole steps of a one-stage model in one call of its stage, as `fit` runs
        `steps_per_execution` steps in one call; `take()` gives the next batch (x, y), read
        where the stage reads it (inside the call on TensorFlow, as `fit` reads its iterator).
        Each step's report is returned once its work is dispatched (`settle` waits for it),
        the last holding what to wait for the update."""
        stage = cast(FusingStage, self.stages[0])  # a one-stage runner runs whole steps on a fuser
        if self._reader is None or self._reader[0] is not take:  # one reader: traced once

            def read() -> tuple[dict[str, Any], Any]:
                x, y = take()
                return self.feed(x), y

            self._reader = (take, read)
        stage.begin_step()
        losses = CallLosses(stage.whole_steps(self._reader[1], count))
        reports = [
            StepReport(
                loss=0.0,
                peak_live=[1],
                update_s=[0.0],
                pending=([], [losses.step(i)]),
                steps_in_call=count,
            )
            for i in range(count)
        ]
        reports[-1].pending = ([(stage, stage.updated())], [losses.step(count - 1)])
        return reports

    def step(
        self, x: Any, y: Any, timed: bool = False, serial: bool = False, settle: bool = True
    ) -> StepReport:
        """One global batch, its updates finished when it returns. `serial` runs the tasks one
        at a time in this thread, each waited for: its time is then its own, not shared with
        other devices on the same cores. With `settle=False` an untimed step returns once its
        work is dispatched, as a Keras `fit` runs ahead of the device: `settle` waits for it
        later (a step over several processes always settles, its loss summed over them)."""
        mailbox = Mailbox()
        clock = time.perf_counter()
        xs = [self.feed(part) for part in self.split(x, self.micro_batches)]
        ys = self.split(y, self.micro_batches)
        runs = {
            device: self._device_tasks(device, xs, ys, mailbox, clock, timed or serial)
            for device in self.local
        }
        results = self._serially(runs, mailbox) if serial else self._concurrently(runs, mailbox)
        local = [s for s in self.stages if device_of(s.index, self.devices) in runs]
        objectives = [loss for r in results for loss in r.losses]
        if not (settle or timed or serial or self.crossings is not None):
            report = step_report(results, len(self.stages), 0.0, serial, 0.0)
            report.pending = ([(stage, stage.updated()) for stage in local], objectives)
            return report
        for stage in local:
            stage.wait(stage.updated())
        duration = time.perf_counter() - clock
        loss = float(sum(float(loss) for loss in objectives))
        if self.crossings is not None:
            loss = self.crossings.total_loss(loss)
        return step_report(results, len(self.stages), loss, serial, duration)

    def settle(self, report: StepReport) -> StepReport:
        """Wait for a step returned unsettled: its updates done, its loss a float."""
        if report.pending is not None:
            updates, objectives = report.pending
            for stage, done in updates:
                stage.wait(done)
            report.loss = float(sum(float(loss) for loss in objectives))
            report.pending = None
        return report

    def _concurrently(self, runs: dict[int, Generator], mailbox: Mailbox) -> list[DeviceStep]:
        if len(runs) == 1 and self.crossings is None:  # one device: nothing runs beside it
            return [drain(run, mailbox) for run in runs.values()]
        crossing = None if self.crossings is None else self.crossings.start(mailbox)
        results, errors = collect([self._pool.submit(drain, run, mailbox) for run in runs.values()])
        if crossing is not None:
            try:
                self.crossings.finish(crossing)
            except BaseException as error:  # noqa: BLE001 - the cause of the devices' abort
                errors.insert(0, error)
        raise_cause(errors)
        return results

    def _serially(self, runs: dict[int, Generator], mailbox: Mailbox) -> list[DeviceStep]:
        for task in execution_order(self.schedule, len(self.stages)):
            device = device_of(task.stage, self.devices)
            if device in runs:
                next(runs[device])
            if self.crossings is not None:  # what the task sends to another process, now
                self.crossings.cross_after(task, mailbox)
        return [drain(run, None) for run in runs.values()]

    def _device_tasks(
        self, device: int, xs, ys, mailbox: Mailbox, clock: float, timed: bool
    ) -> Generator[None, None, DeviceStep]:
        """One device's step, pausing after each task."""
        last = len(self.stages) - 1
        held = [s for s in self.stages if device_of(s.index, self.devices) == device]
        for stage in held:
            stage.begin_step()
        saved: dict[tuple[int, int], Any] = {}  # per (stage, micro-batch): for its backward
        later: dict[tuple[int, int], Any] = {}  # per (stage, micro-batch): for its weight pass
        result = DeviceStep()
        fused = fused_calls(self.schedule[device], last) if self.stages[last].fuses else {}
        applied = False  # by a fused call, with the device's last backward
        sent_back: dict[str, Any] = {}  # by a fused call: what its backward sends upstream
        for position, task in enumerate(self.schedule[device]):
            stage = self.stages[task.stage]
            key = (task.stage, task.micro_batch)
            part = task.kind
            moved = 0.0
            size = 0
            if position - 1 in fused:  # this backward ran in the forward's call
                fused_backward(
                    task, last + 1, result, mailbox, sent_back, clock if timed else None, device
                )
                yield
                continue
            if part is Pass.FORWARD:
                incoming = activations_for(task, last + 1, xs, mailbox)
                start = time.perf_counter()  # a task's time starts once its input is here
                received = stage.put(incoming)  # the copy across the cut
                y = stage.labels(ys[task.micro_batch])
                if timed:
                    stage.wait(received)
                moved = time.perf_counter() - start
                called = time.perf_counter()
                if position in fused:  # the last stage's forward and its backward in one call
                    applied = fused[position].with_update
                    passes = cast(FusingStage, stage).forward_backward(received, y, applied)
                    sent_back, out, objective = passes.sent, passes.sent, passes.objective
                    live = held_by(task.stage, saved, later) + 1
                else:
                    forwarded = stage.forward(received, y)
                    out, objective = forwarded.sent, forwarded.objective
                    saved[key] = forwarded.saved
                    live = held_by(task.stage, saved, later)
                if timed:
                    stage.wait((out, objective))  # the task ends when its work does
                called = time.perf_counter() - called
                size = stage.nbytes(incoming) if task.stage else 0
                note_forward(result, task, live, size)
                if objective is not None:  # the model's loss holds every stage's added losses
                    result.losses.append(objective)
                send(task, last + 1, mailbox, out)
            elif part is Pass.WEIGHT_BACKWARD:  # nothing to receive or send
                start = called = time.perf_counter()
                stage.weight_backward(later.pop(key))
                if timed:
                    stage.wait(stage.gradients())
                called = time.perf_counter() - called
            else:
                kept = saved.pop(key)
                incoming = gradients_for(task, last + 1, mailbox)
                start = time.perf_counter()
                upstream = stage.put(incoming)
                if timed:
                    stage.wait(upstream)
                moved = time.perf_counter() - start
                called = time.perf_counter()
                backwarded = stage.backward(kept, upstream, ys[task.micro_batch], part)
                grads = backwarded.sent
                if timed:
                    stage.wait(grads if task.stage > 0 else stage.gradients())
                called = time.perf_counter() - called
                if part is Pass.INPUT_BACKWARD:
                    later[key] = backwarded.for_weight
                size = stage.nbytes(incoming)
                result.gradients_in[task.stage] = result.gradients_in.get(task.stage, 0) + size
                send(task, last + 1, mailbox, grads)
            if timed:
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
            stage.apply()
        if timed:
            for stage in held:
                stage.wait(stage.updated())
        result.update_s = time.perf_counter() - start
        return result


def train_steps(
    runner: ScheduleRunner,
    take: Callable[[], tuple[Any, Any]],
    epochs: int,
    steps_per_epoch: int,
    recorder: Any,
    first: tuple[Any, Any] | None = None,
    round_end: Callable[[list[StepReport]], None] | None = None,
) -> list[StepReport]:
    """Every step of every epoch through `runner`, `take()` the next step's (x, y), told to
    the step `recorder`; a round's last `TIMED_STEPS` (after its warm-up) timed task by task
    and set aside from the step statistics, their waits being the timeline's, not training's.
    Returns the last round's reports; the runner's threads are closed when it returns or
    fails.

    As Keras's `fit` does, the loop runs one step ahead of the devices: it dispatches a step,
    then waits for the one before and stamps its end, so the host's work of a step overlaps
    the devices' work of the last. Not before a timed step, whose tasks must run alone, nor
    where the recorder evaluates between steps, which must see the step's own weights. The
    timed steps come last, so the steps measured run ahead from warm-up to their end, as
    fit's do: a timed step among them would have the step after it start from idle devices.
    Where the runner can (`ScheduleRunner.steps_together`), the recorder's
    `steps_per_execution` steps run in one call, as `fit` runs them, except the timed ones;
    the `first` batch then rehearses a step run alone before anything is timed (traced, its
    update put back), so the timed steps do not trace it.

    A comparison's later rounds trained in this process (`runs/scheduling/resident_rounds.py`)
    follow as `fit` trains them: at a round's end `round_end` gets its reports, the recorder's
    `next_round` reports the round and gives the next one's recorder, and every stage is put
    back as the first round found it; the same batches come again, already traced.
    """
    together = recorder.steps_per_execution if runner.steps_together else 1
    if recorder.evaluate_every_steps:
        together = 1
    try:
        if together > 1 and first is not None:
            rehearse(runner, *first)
        kept = [stage.snapshot() for stage in runner.stages] if recorder.next_round else None
        recorder.train_begin()  # a later round's recorder begins with the caller's word
        while True:
            reports = _one_round(runner, take, epochs, steps_per_epoch, recorder, together)
            if recorder.next_round is None:
                return reports
            if round_end is not None:
                round_end(reports)
            recorder = recorder.next_round()
            for stage, state in zip(runner.stages, kept, strict=True):
                stage.restore(state)
    finally:
        runner.close()


def _one_round(
    runner: ScheduleRunner,
    take: Callable[[], tuple[Any, Any]],
    epochs: int,
    steps_per_epoch: int,
    recorder: Any,
    together: int,
) -> list[StepReport]:
    """One round's steps (`train_steps`), told to its recorder."""
    total = epochs * steps_per_epoch
    timed = set(range(max(recorder.warmup_steps, total - TIMED_STEPS), total))
    # Steps are stamped once the next is dispatched, as Keras stamps a step that ran ahead;
    # where a call returns only when done, that would give each step the next one's time, so
    # each is stamped as it returns.
    ahead = not recorder.evaluate_every_steps and runner.runs_ahead
    reports: list[StepReport] = []
    waiting: list[StepReport] = []  # dispatched, not yet stamped

    def stamp() -> None:
        nonlocal waiting
        if waiting:
            for report in waiting:
                runner.settle(report)
            recorder.step_end(len(waiting), aside=any(r.tasks for r in waiting))
            waiting = []

    index = 0
    for _ in range(epochs):
        recorder.epoch_begin()
        first = len(reports)
        end = index + steps_per_epoch
        while index < end:
            if index >= recorder.warmup_steps and recorder.after_warmup is not None:
                stamp()
                recorder.wait_for_turn()  # prepared beside other runs: its turn, untimed
            group = range(index, index + together)
            if together > 1 and group[-1] < end and not timed.intersection(group):
                dispatched = runner.steps(take, together)
                alone = False
            else:
                x, y = take()
                alone = index in timed or not ahead
                if alone:
                    stamp()  # the step before, stamped before this one runs
                dispatched = [runner.step(x, y, timed=index in timed, settle=False)]
            reports.extend(dispatched)
            stamp()  # the steps before, finished while these were dispatched
            waiting = dispatched
            if alone or not ahead:
                stamp()
            index += len(dispatched)
        stamp()
        losses = [r.loss for r in reports[first:]]
        recorder.epoch_end({"loss": sum(losses) / len(losses)})
    return reports


def rehearse(runner: ScheduleRunner, x: Any, y: Any) -> None:
    """One step of (x, y), its calls traced, then every stage's state put back: a rehearsal
    must not train the model."""
    kept = [stage.snapshot() for stage in runner.stages]
    try:
        runner.step(x, y)
    finally:
        for stage, state in zip(runner.stages, kept, strict=True):
            stage.restore(state)


def passes_alone(runner: ScheduleRunner, x: Any, y: Any) -> list[StepReport]:
    """`SERIAL_REPEATS` steps of (x, y) with one task at a time (the simulated view's task
    times), then every stage's state put back: the measurement must not train the model. The
    tasks run in this thread: a runner closed after training serves."""
    kept = [stage.snapshot() for stage in runner.stages]
    try:
        return [runner.step(x, y, serial=True) for _ in range(SERIAL_REPEATS)]
    finally:
        for stage, state in zip(runner.stages, kept, strict=True):
            stage.restore(state)
