"""Replay a pipeline schedule on paper: when each task would start and end on K devices.

Used twice per model-parallel run. With unit durations it gives the *planned* chart (the shape of
the schedule, its bubble). With the durations measured per task on the user's machine it gives the
*simulated* view: how long the step would take if the K stages ran on K truly independent devices,
which virtual devices sharing one CPU or GPU cannot show. No TensorFlow here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..errors import GpkError
from .schedules import Task, dependencies, execution_order, validate_schedule


@dataclass(frozen=True)
class TimedTask:
    """One task placed on the time line of its device."""

    stage: int  # index of the stage, from 0
    kind: str  # "F" (forward) or "B" (backward)
    micro_batch: int  # index of the micro-batch, from 0
    start: float  # seconds (or unit steps) from the start of the global batch
    end: float  # when it finished, in the same unit
    device: int | None = None  # index of the device it ran on; None means the stage's index

    def __post_init__(self) -> None:
        if self.device is None:
            object.__setattr__(self, "device", self.stage)  # frozen: set once, here
        if self.end < self.start:
            raise GpkError(f"task {self} ends at {self.end} before it starts at {self.start}")

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.micro_batch}"

    @property
    def task(self) -> Task:
        return Task(self.stage, self.kind, self.micro_batch)

    @property
    def duration(self) -> float:
        return self.end - self.start


def simulate(
    schedule: Sequence[Sequence[Task]],
    duration: Callable[[Task], float],
    transfer: float | Callable[[Task], float] = 0.0,
) -> list[TimedTask]:
    """Start and end of every task when each stage runs its list in order on its own device.

    A task starts once its device is free and its dependencies have ended; a dependency from
    another stage adds `transfer` (a number, or a function of the task whose output is sent).
    Returns the tasks sorted by start time, then stage. Raises ValueError for a schedule the
    engine could not run.
    """
    micro_batches = 1 + max((t.micro_batch for tasks in schedule for t in tasks), default=-1)
    validate_schedule(schedule, len(schedule), micro_batches)
    send = transfer if callable(transfer) else (lambda _task: transfer)
    free = [0.0] * len(schedule)
    ended: dict[Task, float] = {}
    timed = []
    # Dependencies and the device's previous task are placed before each task in this order,
    # so one pass computes every start exactly.
    for task in execution_order(schedule):
        ready = free[task.stage]
        for dep in dependencies(task, len(schedule)):
            delay = _checked("transfer", send(dep), dep) if dep.stage != task.stage else 0.0
            ready = max(ready, ended[dep] + delay)
        end = ready + _checked("duration", duration(task), task)
        ended[task] = free[task.stage] = end
        timed.append(TimedTask(task.stage, task.kind, task.micro_batch, ready, end))
    return sorted(timed, key=lambda t: (t.start, t.stage))


def _checked(what: str, value: float, task: Task) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise GpkError(f"{what} for task {task} is {value}; give a finite number, 0 or more")
    return value


def makespan(timed: Iterable[TimedTask]) -> float:
    """Time from the first task's start to the last task's end: the step time of the pipeline."""
    timed = list(timed)
    if not timed:
        return 0.0
    return max(t.end for t in timed) - min(t.start for t in timed)


def busy_time(timed: Iterable[TimedTask], stage: int) -> float:
    """How long `stage` spent running tasks."""
    return math.fsum(t.duration for t in timed if t.stage == stage)


def bubble_fraction(timed: Iterable[TimedTask], stages: int) -> float:
    """Share of the K devices' time spent idle: idle / (stages x makespan).

    `stages` is passed, not inferred, so a stage that ran nothing counts as fully idle.
    """
    timed = list(timed)
    total = stages * makespan(timed)
    if total == 0:
        return 0.0
    busy = math.fsum(busy_time(timed, s) for s in range(stages))
    return (total - busy) / total


def theoretical_bubble(stages: int, micro_batches: int) -> float:
    """(K-1)/(M+K-1): the bubble of gpipe or 1f1b with equal stages and no transfer time."""
    for name, value in (("stages", stages), ("micro_batches", micro_batches)):
        if value < 1:
            raise GpkError(f"{name}={value} is too few; use {name}=1 or more")
    return (stages - 1) / (micro_batches + stages - 1)
