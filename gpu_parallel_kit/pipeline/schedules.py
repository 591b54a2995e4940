"""Pipeline schedules as plain data: for each device, the order of its tasks.

A schedule is a tuple with one ordered tuple of `Task`s per device (see `tasks`). The pipeline
engine runs one thread per device that executes exactly that device's list, the simulator replays
the same lists on paper, and the timeline plot draws them, so all three agree by construction.
Nothing here imports TensorFlow: schedules are built, checked and printed in milliseconds.

This module holds the table of schedules (`SCHEDULE_TABLE`: each one's task order, whether it
splits the batch, whether devices hold several model chunks, its bubble) and the one default rule,
and builds them; `checks` holds what tasks wait for and the checks, `grid` the text grid. Their
names are re-exported here, where callers have always found them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import GpkError, whole_number
from .checks import dependencies, execution_order, max_live_micro_batches, validate_schedule
from .grid import format_grid
from .tasks import (
    BACKWARD,
    FORWARD,
    INPUT_BACKWARD,
    WEIGHT,
    Pass,
    Schedule,
    Task,
    device_of,
    host_dispatches,
    micro_batch_count,
    splits_backward,
    stage_count,
)

__all__ = [
    "BACKWARD",
    "FORWARD",
    "GPIPE",
    "INPUT_BACKWARD",
    "INTERLEAVED",
    "NAIVE",
    "ONE_F_ONE_B",
    "SCHEDULES",
    "SCHEDULE_TABLE",
    "WEIGHT",
    "ZB_H1",
    "Pass",
    "Schedule",
    "ScheduleRecord",
    "Task",
    "build_schedule",
    "check_plan",
    "default_schedule",
    "default_virtual_stages",
    "dependencies",
    "device_of",
    "execution_order",
    "format_grid",
    "host_dispatches",
    "max_live_micro_batches",
    "micro_batch_count",
    "schedule_record",
    "splits_backward",
    "stage_count",
    "validate_schedule",
]


@dataclass(frozen=True)
class ScheduleRecord:
    """One schedule: its task order, what it splits the batch into, and its bubble."""

    name: str
    # (device, devices K, micro-batches M, chunks v) -> that device's tasks in order
    order: Callable[[int, int, int, int], list[Task]]
    # (K, M, v) -> the idle share of the devices' time its paper predicts
    bubble: Callable[[int, int, int], float]
    micro_batches: bool = True  # splits the batch into micro-batches (False: runs one)
    virtual_stages: bool = False  # each device holds several model chunks, K * v stages in all

    def __repr__(self) -> str:
        return f"<ScheduleRecord {self.name}>"


def build_schedule(name: str, stages: int, micro_batches: int, virtual_stages: int = 1) -> Schedule:
    """The task order of each device for the named schedule (one of `SCHEDULES`).

    `stages` is the number of devices K; `virtual_stages` (interleaved only) the number of model
    chunks v each device holds, so the model has K * v stages, stage s on device s % K.
    """
    check_plan(name, stages, micro_batches, virtual_stages)
    order = schedule_record(name).order
    return tuple(tuple(order(d, stages, micro_batches, virtual_stages)) for d in range(stages))


def schedule_record(name: Any) -> ScheduleRecord:
    """The record of a schedule a user named; an unknown name is one sentence naming the known."""
    record = _BY_NAME.get(name) if isinstance(name, str) else None
    if record is None:
        known = ", ".join(repr(n) for n in SCHEDULES)
        raise GpkError(f"schedule={name!r} is not known; use one of {known}")
    return record


def default_virtual_stages(name: Any) -> int:
    """The model chunks per device when a run does not say: two where the schedule's devices
    hold several, else one (an unknown name too; its check says what is wrong)."""
    record = _BY_NAME.get(name) if isinstance(name, str) else None
    return 2 if record is not None and record.virtual_stages else 1


def default_schedule(micro_batches: int | str | None) -> str:
    """The schedule of a pipeline that names none: naive for one micro-batch (None or 1), the
    first that splits the batch (gpipe) when more, or "auto", are asked."""
    one = micro_batches is None or micro_batches == 1
    return next(r.name for r in SCHEDULE_TABLE if r.micro_batches != one)


def check_plan(name: str, stages: int, micro_batches: int, virtual_stages: int = 1) -> None:
    """Raise GpkError (TypeError for a non-int) unless `build_schedule` can build this plan.

    Shared with `simulation.theoretical_bubble`, so a formula is never quoted for a schedule
    that could not be built.
    """
    whole_number(stages, "stages")
    whole_number(micro_batches, "micro_batches")
    whole_number(virtual_stages, "virtual_stages")
    record = schedule_record(name)
    if not record.micro_batches and micro_batches != 1:
        raise GpkError(
            f"schedule={name!r} runs one micro-batch; use micro_batches=1, "
            f"or schedule={default_schedule(micro_batches)!r} for {micro_batches}"
        )
    if record.virtual_stages:
        _check_chunks(name, stages, micro_batches, virtual_stages)
    elif virtual_stages != 1:
        chunked = ", ".join(repr(r.name) for r in SCHEDULE_TABLE if r.virtual_stages)
        raise GpkError(
            f"virtual_stages={virtual_stages} applies only to schedule={chunked}; "
            f"use virtual_stages=1 with schedule={name!r}"
        )


def _check_chunks(name: str, stages: int, micro_batches: int, virtual_stages: int) -> None:
    if virtual_stages < 2:
        raise GpkError(
            f"schedule={name!r} needs virtual_stages=2 or more model chunks per device, "
            f"not {virtual_stages}; use e.g. virtual_stages=2, or schedule='1f1b'"
        )
    if micro_batches % stages:
        # Megatron-LM's rule: micro-batches go round the devices in groups of K.
        lower = micro_batches - micro_batches % stages
        examples = f"{lower} or {lower + stages}" if lower else f"{stages} or {2 * stages}"
        raise GpkError(
            f"schedule={name!r} needs micro_batches={micro_batches} to be a multiple of "
            f"the {stages} devices; use e.g. micro_batches={examples}"
        )


def _gpipe(stage: int, stages: int, micro_batches: int) -> list[Task]:
    # Backwards in reverse order, as in the GPipe paper's figure: the last stage can start
    # B(M-1) the moment F(M-1) ends, and each earlier stage receives gradients in that order.
    forwards = [Task(stage, FORWARD, m) for m in range(micro_batches)]
    backwards = [Task(stage, BACKWARD, m) for m in reversed(range(micro_batches))]
    return forwards + backwards


def _one_f_one_b(stage: int, stages: int, micro_batches: int) -> list[Task]:
    # Warm-up forwards fill the pipe below this stage; after them each backward frees one
    # micro-batch's activations before the next forward stores another, which caps what a
    # stage holds at K - s instead of M (PipeDream-flush, Megatron's non-interleaved 1F1B).
    warmup = min(stages - 1 - stage, micro_batches)
    order = [Task(stage, FORWARD, m) for m in range(warmup)]
    for m in range(micro_batches - warmup):
        order += [Task(stage, FORWARD, warmup + m), Task(stage, BACKWARD, m)]
    order += [Task(stage, BACKWARD, m) for m in range(micro_batches - warmup, micro_batches)]
    return order


def _interleaved(device: int, devices: int, micro_batches: int, chunks: int) -> list[Task]:
    # Megatron-LM's interleaved 1F1B (Narayanan et al. 2021). The device walks its v*M chunk
    # passes in groups of K*v: K micro-batches through chunk 0, the same K through chunk 1, ...,
    # then the next K (depth first: an early micro-batch reaches the model's end soon). Backwards
    # walk the chunks in reverse. Warm-up is the (v-1)*K forwards every device runs before the
    # last chunk's first backward can exist, plus 2 per hop from the last device; then one
    # forward and one backward alternate, and the cool-down drains the remaining backwards.
    passes = chunks * micro_batches
    warmup = min((devices - device - 1) * 2 + (chunks - 1) * devices, passes)

    def nth(k: int, kind: Pass) -> Task:
        in_group = k % (devices * chunks)
        chunk = in_group // devices
        if kind == BACKWARD:
            chunk = chunks - 1 - chunk
        micro_batch = k // (devices * chunks) * devices + k % devices
        return Task(chunk * devices + device, kind, micro_batch)

    order = [nth(k, FORWARD) for k in range(warmup)]
    for k in range(passes - warmup):
        order += [nth(warmup + k, FORWARD), nth(k, BACKWARD)]
    order += [nth(k, BACKWARD) for k in range(passes - warmup, passes)]
    return order


def _zb_h1(stage: int, stages: int, micro_batches: int) -> list[Task]:
    # Zero Bubble H1 (Qi et al. 2023): 1F1B's order of F and B, each B an input backward (I),
    # so the stage upstream gets its gradient without waiting for the weight gradient. Stage s
    # defers its W passes by s micro-batches: the later a stage, the earlier its backwards end,
    # and the deferred W's fill the time it would idle waiting in the cool-down. Each stage then
    # holds at most K micro-batches from F to W, 1F1B's peak (stage 0's); in F:B:W = 1:1:1 and
    # with M >= K the bubble is K-1 passes instead of 1F1B's 3(K-1). PyTorch's
    # ScheduleInterleavedZeroBubble with one stage per rank orders the tasks the same way.
    order: list[Task] = []
    weights = 0
    for task in _one_f_one_b(stage, stages, micro_batches):
        if task.kind is BACKWARD:
            task = Task(stage, INPUT_BACKWARD, task.micro_batch)
        order.append(task)
        if task.kind is INPUT_BACKWARD and task.micro_batch >= stage:
            order.append(Task(stage, WEIGHT, weights))
            weights += 1
    order += [Task(stage, WEIGHT, m) for m in range(weights, micro_batches)]
    return order


def _passes_bubble(stages: int, micro_batches: int, chunks: int) -> float:
    # (K-1)/(v*M) to the busy time (Narayanan et al. 2021), v = 1 for one stage per device.
    return (stages - 1) / (chunks * micro_batches + stages - 1)


def _zb_h1_bubble(stages: int, micro_batches: int, chunks: int) -> float:
    # In passes of one unit, device 0 runs 3M of them. Its first B cannot start before F(0)
    # crossed K stages and B(0) came back over K-1, so its step lasts at least 2K-1 + 2M; with
    # M >= K the W's fill that wait and the paper's (K-1) extra passes are the whole bubble.
    step = max(3 * micro_batches + stages - 1, 2 * micro_batches + 2 * stages - 1)
    return 1 - 3 * micro_batches / step


def _one_chunk(
    order: Callable[[int, int, int], list[Task]],
) -> Callable[[int, int, int, int], list[Task]]:
    return lambda device, devices, micro_batches, chunks: order(device, devices, micro_batches)


# In the order help texts and choices list them; `default_schedule` takes the first that fits.
# naive: gpipe's order with one micro-batch, stage after stage
NAIVE = ScheduleRecord("naive", _one_chunk(_gpipe), _passes_bubble, micro_batches=False)
GPIPE = ScheduleRecord("gpipe", _one_chunk(_gpipe), _passes_bubble)
ONE_F_ONE_B = ScheduleRecord("1f1b", _one_chunk(_one_f_one_b), _passes_bubble)
INTERLEAVED = ScheduleRecord("interleaved", _interleaved, _passes_bubble, virtual_stages=True)
ZB_H1 = ScheduleRecord("zb-h1", _one_chunk(_zb_h1), _zb_h1_bubble)
SCHEDULE_TABLE: tuple[ScheduleRecord, ...] = (NAIVE, GPIPE, ONE_F_ONE_B, INTERLEAVED, ZB_H1)
SCHEDULES: tuple[str, ...] = tuple(record.name for record in SCHEDULE_TABLE)
_BY_NAME: dict[str, ScheduleRecord] = {record.name: record for record in SCHEDULE_TABLE}
