"""A pipeline's step replayed task by task: each task's compute and the collectives inside it,
and the messages across the cuts, blocking the receiving device or in flight.

The cost model's one replay. The projection of measured rows (`step_time_model.pipeline`), the
projection of a pipeline on sub-meshes (`mesh_pipeline.mesh_pipeline`) and the plan search's
leading plans (`bubble_refinement.refine`) each give it their tasks' seconds;
`pipeline/simulation.py` places the tasks.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...pipeline.schedules import BACKWARD, FORWARD, Task, splits_backward
from ...pipeline.simulation import makespan, simulate
from ...pipeline.tasks import (
    INPUT_BACKWARD,
    KINDS,
    WEIGHT,
    Pass,
    Schedule,
    micro_batch_count,
    stage_count,
)

TaskSeconds = Mapping[tuple[int, Pass], float]  # seconds of one task, by (stage, kind)


def stage_work(
    schedule: Schedule, forward: Sequence[float], backward: Sequence[float]
) -> dict[tuple[int, Pass], float]:
    """Each task's compute seconds, by (stage, kind), from each stage's forward and backward of
    one micro-batch.

    Where the schedule splits the backward (zb-h1), the input gradient (I) and the weight
    gradient (W) are each taken as half of it.
    """
    work = {(s, FORWARD): seconds for s, seconds in enumerate(forward)}
    if splits_backward(schedule):
        work |= {(s, INPUT_BACKWARD): seconds / 2 for s, seconds in enumerate(backward)}
        work |= {(s, WEIGHT): seconds / 2 for s, seconds in enumerate(backward)}
    else:
        work |= {(s, BACKWARD): seconds for s, seconds in enumerate(backward)}
    return work


@dataclass(frozen=True)
class PipelineTasks:
    """A pipeline's tasks and what each costs: what the replay needs.

    Args:
        schedule: each device's task list (`pipeline.schedules.build_schedule`).
        work: compute seconds of one task, by (stage, kind) (`stage_work`).
        sends: seconds of one micro-batch's message across each cut, stage s to s + 1.
        comm: seconds of the collectives inside one task, by (stage, kind): a stage's tensor
            all-reduces, its gradients' all-reduce. A task not named has none.
    """

    schedule: Schedule
    work: TaskSeconds
    sends: Sequence[float]
    comm: TaskSeconds = field(default_factory=dict)

    def compute(self, task: Task) -> float:
        """The task's compute alone."""
        return self.work[(task.stage, task.kind)]

    def inside(self, task: Task) -> float:
        """The task's compute and the collectives it runs."""
        return self.compute(task) + self.comm.get((task.stage, task.kind), 0.0)

    def blocking(self, task: Task) -> float:
        """The task with the message it receives before it, on the receiving device."""
        received = task.received(self.stages)
        return self.inside(task) + (0.0 if received is None else self._send(received.cut))

    def in_flight(self, sender: Task) -> float:
        """What the task's output takes to reach the next device while both compute on."""
        sent = sender.sent(self.stages)
        return 0.0 if sent is None else self._send(sent.cut)

    @functools.cached_property
    def stages(self) -> int:
        """The schedule's model stages."""
        return stage_count(self.schedule)

    def _send(self, cut: int) -> float:
        return self.sends[cut] if 0 <= cut < len(self.sends) else 0.0


@dataclass(frozen=True)
class ReplayedStep:
    """One replayed step; what it would take with free communication, each stage's compute and
    the bubble are replayed or summed when first asked."""

    tasks: PipelineTasks
    step_s: float  # the step, communication included

    @functools.cached_property
    def free_s(self) -> float:
        """The step with free communication: the tasks' compute alone."""
        return makespan(simulate(self.tasks.schedule, self.tasks.compute))

    @functools.cached_property
    def busy_s(self) -> tuple[float, ...]:
        """Each stage's compute over the step."""
        work, micro_batches = self.tasks.work, micro_batch_count(self.tasks.schedule)
        return tuple(
            micro_batches * sum(work.get((s, kind), 0.0) for kind in KINDS)
            for s in range(stage_count(self.tasks.schedule))
        )

    @property
    def sends_s(self) -> float:
        """Every message of the step across every cut, forward and back."""
        return micro_batch_count(self.tasks.schedule) * 2 * math.fsum(self.tasks.sends)

    @property
    def bubble(self) -> float:
        """The share of the stages' time not computing: idle, or waiting on a message."""
        busy = self.busy_s
        return 1.0 - math.fsum(busy) / (len(busy) * self.step_s) if self.step_s > 0 else 0.0


def replay(tasks: PipelineTasks, overlap: bool = False) -> ReplayedStep:
    """The step of `tasks`, each device running its list in order (`pipeline/simulation.py`).

    Args:
        tasks: the schedule and what each task costs.
        overlap: whether a message across a cut travels while both devices compute; else the
            receiving device waits for it before its task.
    """
    if overlap:
        timed = simulate(tasks.schedule, tasks.inside, tasks.in_flight)
    else:
        timed = simulate(tasks.schedule, tasks.blocking)
    return ReplayedStep(tasks, makespan(timed))
