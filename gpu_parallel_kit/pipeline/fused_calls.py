"""Which tasks of a device's list run in one compiled call with the task after them: the last
stage's forward and backward of a micro-batch, and the update with a device's last backward.

The last stage's forward of a micro-batch and its whole backward often run back to back: in
every 1F1B-like schedule, and always with one micro-batch. Nothing waits between them (the loss
is computed on that stage), so both runtimes run the pair as one compiled call: the forward is
differentiated where it runs instead of being recomputed or kept between two calls. Where that
backward is the device's last task and the device holds that stage alone, the stage's update
joins the same call, so a pipeline of one stage and one micro-batch does what one device's
training step does. The schedule, the timeline and the simulation are unchanged: the pair keeps
its two tasks, the backward recorded as ending with the forward's call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .tasks import BACKWARD, FORWARD, WEIGHT, Task


@dataclass(frozen=True)
class FusedCall:
    """A forward at `position` in a device's list run with its own backward, the next task."""

    position: int  # of the forward in the device's list
    with_update: bool  # the stage's update too: the backward is the device's last task


def fused_calls(tasks: Sequence[Task], last_stage: int) -> dict[int, FusedCall]:
    """The forwards of one device's `tasks` that run with their backward, by position.

    >>> tasks = [Task.parse(t) for t in ("1F0", "1B0", "1F1", "1B1")]
    >>> sorted((p, c.with_update) for p, c in fused_calls(tasks, last_stage=1).items())
    [(0, False), (2, True)]
    """
    if any(task.kind == WEIGHT for task in tasks):
        return {}  # a split backward: its B is the input half only, W follows apart
    alone = len({task.stage for task in tasks}) == 1
    fused = {}
    for position, (task, after) in enumerate(zip(tasks, tasks[1:], strict=False)):
        if (
            task.kind == FORWARD
            and task.stage == last_stage
            and after == Task(task.stage, BACKWARD, task.micro_batch)
        ):
            with_update = alone and position + 1 == len(tasks) - 1
            fused[position] = FusedCall(position, with_update)
    return fused
