"""Pipeline schedules as plain data: for each device, the order of its tasks.

A schedule is a tuple with one ordered tuple of `Task`s per device (see `tasks`). The pipeline
engine runs one thread per device that executes exactly that device's list, the simulator replays
the same lists on paper, and the timeline plot draws them, so all three agree by construction.
Nothing here imports TensorFlow: schedules are built, checked and printed in milliseconds.

This module builds them; `checks` holds what tasks wait for and the checks, `grid` the text grid.
Their names are re-exported here, where callers have always found them.
"""

from __future__ import annotations

from ..errors import GpkError, whole_number
from .checks import dependencies, execution_order, max_live_micro_batches, validate_schedule
from .grid import format_grid
from .tasks import (
    BACKWARD,
    FORWARD,
    WEIGHT,
    Schedule,
    Task,
    device_of,
    micro_batch_count,
    splits_backward,
    stage_count,
)

__all__ = [
    "BACKWARD",
    "FORWARD",
    "SCHEDULES",
    "WEIGHT",
    "Schedule",
    "Task",
    "build_schedule",
    "check_plan",
    "dependencies",
    "device_of",
    "execution_order",
    "format_grid",
    "max_live_micro_batches",
    "micro_batch_count",
    "splits_backward",
    "stage_count",
    "validate_schedule",
]

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved", "zb-h1")


def build_schedule(name: str, stages: int, micro_batches: int, virtual_stages: int = 1) -> Schedule:
    """The task order of each device for the named schedule (one of `SCHEDULES`).

    `stages` is the number of devices K; `virtual_stages` (interleaved only) the number of model
    chunks v each device holds, so the model has K * v stages, stage s on device s % K.
    """
    check_plan(name, stages, micro_batches, virtual_stages)
    if name == "interleaved":
        return tuple(
            tuple(_interleaved(d, stages, micro_batches, virtual_stages)) for d in range(stages)
        )
    build = {"1f1b": _one_f_one_b, "zb-h1": _zb_h1}.get(name, _gpipe)  # naive: gpipe with M=1
    return tuple(tuple(build(stage, stages, micro_batches)) for stage in range(stages))


def check_plan(name: str, stages: int, micro_batches: int, virtual_stages: int = 1) -> None:
    """Raise GpkError (TypeError for a non-int) unless `build_schedule` can build this plan.

    Shared with `simulation.theoretical_bubble`, so a formula is never quoted for a schedule
    that could not be built.
    """
    whole_number(stages, "stages")
    whole_number(micro_batches, "micro_batches")
    whole_number(virtual_stages, "virtual_stages")
    if name not in SCHEDULES:
        known = ", ".join(repr(n) for n in SCHEDULES)
        raise GpkError(f"schedule={name!r} is not known; use one of {known}")
    if name == "naive" and micro_batches != 1:
        raise GpkError(
            "schedule='naive' runs one micro-batch; use micro_batches=1, "
            f"or schedule='gpipe' for {micro_batches}"
        )
    if name == "interleaved":
        _check_interleaved(stages, micro_batches, virtual_stages)
    elif virtual_stages != 1:
        raise GpkError(
            f"virtual_stages={virtual_stages} applies only to schedule='interleaved'; "
            f"use virtual_stages=1 with schedule={name!r}"
        )


def _check_interleaved(stages: int, micro_batches: int, virtual_stages: int) -> None:
    if virtual_stages < 2:
        raise GpkError(
            f"schedule='interleaved' needs virtual_stages=2 or more model chunks per device, "
            f"not {virtual_stages}; use e.g. virtual_stages=2, or schedule='1f1b'"
        )
    if micro_batches % stages:
        # Megatron-LM's rule: micro-batches go round the devices in groups of K.
        lower = micro_batches - micro_batches % stages
        examples = f"{lower} or {lower + stages}" if lower else f"{stages} or {2 * stages}"
        raise GpkError(
            f"schedule='interleaved' needs micro_batches={micro_batches} to be a multiple of "
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

    def nth(k: int, kind: str) -> Task:
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
    # Zero Bubble H1 (Qi et al. 2023): 1F1B's order of F and B, with B only the input gradient,
    # so the stage upstream gets its gradient without waiting for the weight gradient. Stage s
    # defers its W passes by s micro-batches: the later a stage, the earlier its backwards end,
    # and the deferred W's fill the time it would idle waiting in the cool-down. Each stage then
    # holds at most K micro-batches from F to W, 1F1B's peak (stage 0's); in F:B:W = 1:1:1 and
    # with M >= K the bubble is K-1 passes instead of 1F1B's 3(K-1). PyTorch's
    # ScheduleInterleavedZeroBubble with one stage per rank orders the tasks the same way.
    order: list[Task] = []
    weights = 0
    for task in _one_f_one_b(stage, stages, micro_batches):
        order.append(task)
        if task.kind == BACKWARD and task.micro_batch >= stage:
            order.append(Task(stage, WEIGHT, weights))
            weights += 1
    order += [Task(stage, WEIGHT, m) for m in range(weights, micro_batches)]
    return order
