"""Replay a pipeline schedule on paper: when each task would start and end on K devices.

Used twice per pipeline run. With unit durations it gives the *planned* chart (the shape of
the schedule, its bubble). With the durations measured per task on the user's machine it gives the
*simulated* view: how long the step would take if the K devices were truly independent, which
virtual devices sharing one CPU or GPU cannot show. Tasks are placed on devices, not stages: an
interleaved device runs several stages, one task at a time. No TensorFlow here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import overload

from ..errors import GpkError
from .schedules import (
    ONE_F_ONE_B,
    Pass,
    Task,
    check_plan,
    dependencies,
    device_of,
    execution_order,
    micro_batch_count,
    schedule_record,
    stage_count,
    validate_schedule,
)


@dataclass(frozen=True)
class TimedTask:
    """One task placed on the time line of its device."""

    stage: int  # index of the model stage, from 0
    kind: Pass
    micro_batch: int  # index of the micro-batch, from 0
    start: float  # seconds (or unit steps) from the start of the global batch
    end: float  # when it finished, in the same unit
    device: int | None = None  # index of the device it ran on; None means the stage's index

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Pass(self.kind))  # frozen: "F" read back as a Pass
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
    """Start and end of every task when each device runs its list in order.

    `schedule[d]` is device d's list; stage s runs on `device_of(s, len(schedule))`. A task
    starts once its device is free and its dependencies have ended; a dependency from another
    device adds `transfer` (a number, or a function of the task whose output is sent).
    `duration` is asked about every task, W included. Returns the tasks sorted by start time,
    then device. Raises ValueError for a schedule the engine could not run.
    """
    devices, stages = len(schedule), stage_count(schedule)
    validate_schedule(schedule, devices, micro_batch_count(schedule), -(-stages // devices))
    send = transfer if callable(transfer) else (lambda _task: transfer)
    free = [0.0] * devices
    ended: dict[Task, float] = {}
    timed = []
    # Dependencies and the device's previous task are placed before each task in this order,
    # so one pass computes every start exactly.
    for task in execution_order(schedule, stages):
        device = device_of(task.stage, devices)
        ready = free[device]
        for dep in dependencies(task, stages):
            crosses = device_of(dep.stage, devices) != device
            delay = _checked("transfer", send(dep), dep) if crosses else 0.0
            ready = max(ready, ended[dep] + delay)
        end = ready + _checked("duration", duration(task), task)
        ended[task] = free[device] = end
        timed.append(TimedTask(task.stage, task.kind, task.micro_batch, ready, end, device))
    return sorted(timed, key=lambda t: (t.start, t.device))


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


def busy_time(timed: Iterable[TimedTask], device: int) -> float:
    """How long `device` spent running tasks (without interleaving, device d is stage d)."""
    return math.fsum(t.duration for t in timed if t.device == device)


def bubble_fraction(timed: Iterable[TimedTask], devices: int) -> float:
    """Share of the K devices' time spent idle: idle / (devices x makespan).

    `devices` is passed, not inferred, so a device that ran nothing counts as fully idle.
    """
    timed = list(timed)
    total = devices * makespan(timed)
    if total == 0:
        return 0.0
    busy = math.fsum(busy_time(timed, d) for d in range(devices))
    return (total - busy) / total


@overload
def theoretical_bubble(schedule: int, stages: int) -> float: ...


@overload
def theoretical_bubble(
    schedule: str, stages: int, micro_batches: int, virtual_stages: int = 1
) -> float: ...


def theoretical_bubble(
    schedule: str | int, stages: int, micro_batches: int | None = None, virtual_stages: int = 1
) -> float:
    """The idle share of the K devices' time that the named schedule's paper predicts.

    With equal stages, no transfer time, and for zb-h1 F:B:W = 1:1:1. Papers quote the bubble
    as a ratio r to the ideal (busy) time: (K-1)/M for naive, gpipe and 1f1b, (K-1)/(v*M) for
    interleaved (Narayanan et al. 2021), (K-1)/(3M) for zb-h1 (Qi et al. 2023); the idle share
    that `bubble_fraction` measures is r/(1+r), e.g. (K-1)/(M+K-1) for 1f1b. zb-h1's holds for
    M >= K; with fewer micro-batches the W's cannot fill the warm-up and the share is
    (2K-1-M)/(2M+2K-1). Each is what `simulate` measures for the built schedule, exactly.

    `theoretical_bubble(stages, micro_batches)`, the older form, is 1f1b's (and gpipe's).
    """
    if not isinstance(schedule, str):
        schedule, stages, micro_batches = ONE_F_ONE_B.name, schedule, stages
    if micro_batches is None:
        raise TypeError("theoretical_bubble needs micro_batches after the schedule and stages")
    check_plan(schedule, stages, micro_batches, virtual_stages)
    return schedule_record(schedule).bubble(stages, micro_batches, virtual_stages)
