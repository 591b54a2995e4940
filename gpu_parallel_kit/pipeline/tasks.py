"""One task of a pipeline schedule, and where model stages live on devices.

A task is one pass of one micro-batch through one *model stage* (a chunk of the model): forward
"F", backward "B", or, when a schedule splits the backward (zb-h1), "B" for the input gradient and
"W" for the weight gradient. Its text form, "1F0" or "2W5", round-trips through `Task.parse`, as
PyTorch's `torch.distributed.pipelining` actions do.

A schedule is a tuple with one ordered tuple of tasks per *device*. Without interleaving a device
holds one stage, so `schedule[s]` is stage s's list. With `virtual_stages=v` on K devices there are
K*v stages and stage s lives on device s % K (Megatron-LM's round-robin chunks), so device d runs
stages d, d+K, d+2K, ... in the order its list gives.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import GpkError

FORWARD = "F"
BACKWARD = "B"  # the whole backward, or only the input gradient when W tasks are present
WEIGHT = "W"  # the weight gradient of a split backward: deferred into the bubbles
KINDS = (FORWARD, BACKWARD, WEIGHT)


class Pass(enum.Enum):
    """What a task computes on its stage: each kind of pass a stage's calls offer.

    A schedule's text names three kinds (F, B, W); its "B" is the whole backward, or, in a
    schedule with W tasks (zb-h1), only the input's half. The runners ask `task_pass` and hand
    the stage one of these four, so no stage reads a schedule-wide flag.
    """

    FORWARD = "forward"
    BACKWARD = "backward"  # the input's gradient and the weights', in one pass
    INPUT_BACKWARD = "input backward"  # the input's gradient only: what upstream waits for
    WEIGHT_BACKWARD = "weight backward"  # the weights' gradient, deferred into the bubbles


def task_pass(task: Task, split: bool) -> Pass:
    """The pass `task` runs, `split` saying whether its schedule splits the backward
    (`splits_backward`)."""
    if task.kind == FORWARD:
        return Pass.FORWARD
    if task.kind == WEIGHT:
        return Pass.WEIGHT_BACKWARD
    return Pass.INPUT_BACKWARD if split else Pass.BACKWARD


_TASK_TEXT = re.compile(r"(\d+)([FBW])(\d+)")


@dataclass(frozen=True)
class Task:
    """One forward, backward or weight-gradient pass of one micro-batch through one stage."""

    stage: int  # index of the model stage (the chunk of the model), from 0
    kind: str  # "F" (forward), "B" (backward, or input gradient) or "W" (weight gradient)
    micro_batch: int  # index of the micro-batch within the global batch, from 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise GpkError(
                f"task kind {self.kind!r} is not known; use 'F' or 'B', "
                "or 'W' for the weight gradient of a split backward"
            )
        if self.stage < 0 or self.micro_batch < 0:
            raise GpkError(
                f"task {self} has a negative index; stages and micro-batches count from 0"
            )

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.micro_batch}"

    @classmethod
    def parse(cls, text: str) -> Task:
        """The inverse of `str(task)`: "1F0" is stage 1, forward, micro-batch 0."""
        match = _TASK_TEXT.fullmatch(text.strip())
        if match is None:
            raise GpkError(
                f"cannot read task {text!r}; write stage, F, B or W, micro-batch, "
                "e.g. '1F0' or '2W5'"
            )
        stage, kind, micro_batch = match.groups()
        return cls(int(stage), kind, int(micro_batch))


Schedule = tuple[tuple[Task, ...], ...]


def device_of(stage: int, devices: int) -> int:
    """The device that holds model stage `stage` when `devices` devices share the stages.

    Round-robin, as Megatron-LM assigns interleaved chunks: consecutive stages sit on consecutive
    devices, so every stage boundary is a transfer and each device's chunks are spread evenly
    along the model. With one stage per device this is the identity.
    """
    if devices < 1:
        raise GpkError(f"devices={devices} is too few; use devices=1 or more")
    return stage % devices


def stage_count(schedule: Sequence[Sequence[Task]]) -> int:
    """How many model stages `schedule` runs: one past the highest stage any task names.

    Equals the number of device lists unless the schedule is interleaved (then it is K*v).
    """
    return 1 + max((t.stage for tasks in schedule for t in tasks), default=-1)


def micro_batch_count(schedule: Sequence[Sequence[Task]]) -> int:
    """How many micro-batches `schedule` runs: one past the highest micro-batch index."""
    return 1 + max((t.micro_batch for tasks in schedule for t in tasks), default=-1)


def splits_backward(schedule: Sequence[Sequence[Task]]) -> bool:
    """Whether the backward is split: B computes only input gradients and W the weights'.

    The engine needs this to know what a B task must do: the whole backward, or only the part
    the upstream stage waits for.
    """
    return any(t.kind == WEIGHT for tasks in schedule for t in tasks)
