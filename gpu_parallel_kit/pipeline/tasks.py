"""One task of a pipeline schedule, what it sends to another stage, and where model stages live.

A task is one pass of one micro-batch through one *model stage* (a chunk of the model): a
forward "F", a whole backward "B", or, when a schedule splits the backward (zb-h1), an input
backward "I" (the input's gradient, what the stage upstream waits for) and a weight backward "W"
(the weights' gradient, deferred into the bubbles). Its text form, "1F0" or "2W5", round-trips
through `Task.parse`, as PyTorch's `torch.distributed.pipelining` actions do (there "I" is
`BACKWARD_INPUT` too). A forward sends its output across the cut below the next stage; a
backward sends its input's gradient across the cut above: `Task.sent` and `Task.received` say
which, for the runtimes, the replay and the process crossings alike.

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
from typing import NamedTuple

from ..errors import GpkError


class Pass(enum.StrEnum):
    """What a task computes on its stage; its value is its letter in a task's text.

    A str enum, so a record read back from JSON ("F") finds the pass it names.
    """

    FORWARD = "F"
    BACKWARD = "B"  # the input's gradient and the weights', in one pass
    INPUT_BACKWARD = "I"  # the input's gradient only: what upstream waits for
    WEIGHT_BACKWARD = "W"  # the weights' gradient, deferred into the bubbles

    @property
    def sends_gradient(self) -> bool:
        """Whether the pass hands its input's gradient to the stage upstream."""
        return self in (Pass.BACKWARD, Pass.INPUT_BACKWARD)


FORWARD = Pass.FORWARD
BACKWARD = Pass.BACKWARD
INPUT_BACKWARD = Pass.INPUT_BACKWARD
WEIGHT = Pass.WEIGHT_BACKWARD
KINDS = tuple(Pass)


class Carried(enum.StrEnum):
    """What crosses a cut: a forward's activations, or a backward's gradients."""

    ACTIVATIONS = "act"
    GRADIENTS = "grad"


class MailboxKey(NamedTuple):
    """Where a runtime's mailbox keeps one message: what it carries, for which stage (the
    receiver) and micro-batch."""

    carried: Carried
    stage: int
    micro_batch: int


class Message(NamedTuple):
    """One message between stages: the cut it crosses (between stages `cut` and `cut + 1`),
    the stage that sends it and the one that receives it."""

    carried: Carried
    cut: int
    sender: int
    receiver: int
    micro_batch: int

    @property
    def key(self) -> MailboxKey:
        return MailboxKey(self.carried, self.receiver, self.micro_batch)


_TASK_TEXT = re.compile(r"(\d+)([FBIW])(\d+)")


@dataclass(frozen=True)
class Task:
    """One forward, backward, input-backward or weight-backward pass of one micro-batch through
    one stage."""

    stage: int  # index of the model stage (the chunk of the model), from 0
    kind: Pass
    micro_batch: int  # index of the micro-batch within the global batch, from 0

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", Pass(self.kind))  # frozen: "F" read as a Pass
        except ValueError:
            raise GpkError(
                f"task kind {self.kind!r} is not known; use 'F' or 'B', or 'I' and 'W' for "
                "the input and weight gradients of a split backward"
            ) from None
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
                f"cannot read task {text!r}; write stage, F, B, I or W, micro-batch, "
                "e.g. '1F0' or '2W5'"
            )
        stage, kind, micro_batch = match.groups()
        return cls(int(stage), Pass(kind), int(micro_batch))

    def sent(self, stages: int) -> Message | None:
        """What the task sends to another of `stages` stages: a forward's output to the stage
        below it, a backward's input gradient to the stage above; None for the last stage's
        forward, the first stage's backward and a weight backward.

        >>> Task.parse("0F3").sent(2)
        Message(carried=<Carried.ACTIVATIONS: 'act'>, cut=0, sender=0, receiver=1, micro_batch=3)
        """
        s, m = self.stage, self.micro_batch
        if self.kind is Pass.FORWARD and s < stages - 1:
            return Message(Carried.ACTIVATIONS, s, s, s + 1, m)
        if self.kind.sends_gradient and s > 0:
            return Message(Carried.GRADIENTS, s - 1, s, s - 1, m)
        return None

    def received(self, stages: int) -> Message | None:
        """What the task waits for from another of `stages` stages: a forward's input from the
        stage above, a backward's output gradient from the stage below; None where nothing
        crosses (the first stage's forward, the last stage's backward, a weight backward)."""
        s, m = self.stage, self.micro_batch
        if self.kind is Pass.FORWARD and s > 0:
            return Message(Carried.ACTIVATIONS, s - 1, s - 1, s, m)
        if self.kind.sends_gradient and s < stages - 1:
            return Message(Carried.GRADIENTS, s, s + 1, s, m)
        return None


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
    """Whether the backward is split into input (I) and weight (W) passes."""
    return any(t.kind is WEIGHT for tasks in schedule for t in tasks)


def host_dispatches(schedule: Sequence[Sequence[Task]]) -> int:
    """The calls one host dispatches a step of this schedule: every task of every device, and
    each device's update of its weights."""
    return sum(len(tasks) for tasks in schedule) + len(schedule)
