"""What tasks wait for, one serial order that respects it, and the checks on a schedule.

Dependencies (the engine waits for these, the simulator models them), for S model stages:
F(s, m) after F(s-1, m); B(s, m) after B(s+1, m) and after F(s, m); the last stage's B(m) after
its F(m); W(s, m) after B(s, m). F(s-1, m) and B(s+1, m) sit on another device whenever there
is more than one, so those two carry a transfer; F(s, m) and B(s, m) sit on the task's own device.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ..errors import GpkError
from .grid import format_grid
from .tasks import (
    BACKWARD,
    FORWARD,
    INPUT_BACKWARD,
    WEIGHT,
    Pass,
    Task,
    device_of,
    splits_backward,
    stage_count,
)


def dependencies(task: Task, stages: int) -> tuple[Task, ...]:
    """The tasks that must end before `task` may start, in a pipeline of `stages` model stages."""
    s, m = task.stage, task.micro_batch
    if task.kind is FORWARD:
        return () if s == 0 else (Task(s - 1, FORWARD, m),)
    if task.kind is WEIGHT:
        return (Task(s, INPUT_BACKWARD, m),)  # the output gradient I received; I ran the tape
    own_forward = Task(s, FORWARD, m)
    if s == stages - 1:
        return (own_forward,)
    return (Task(s + 1, task.kind, m), own_forward)


def execution_order(schedule: Sequence[Sequence[Task]], stages: int | None = None) -> list[Task]:
    """All tasks in one order that keeps each device's order and every dependency.

    Replays the devices in lock-step and raises ValueError (with the grid) when no device can
    move, which is exactly when the engine's threads would wait for each other forever. `stages`
    is the number of model stages; by default the highest stage named, plus one.
    """
    stages = stage_count(schedule) if stages is None else stages
    position = [0] * len(schedule)
    done: set[Task] = set()
    order: list[Task] = []
    while len(order) < sum(len(tasks) for tasks in schedule):
        moved = False
        for d, tasks in enumerate(schedule):
            while position[d] < len(tasks) and done.issuperset(
                dependencies(tasks[position[d]], stages)
            ):
                done.add(tasks[position[d]])
                order.append(tasks[position[d]])
                position[d] += 1
                moved = True
        if not moved:
            raise _invalid(_deadlock_sentence(schedule, stages, position, done), schedule)
    return order


def _deadlock_sentence(schedule, stages: int, position: list[int], done: set[Task]) -> str:
    waits = []
    for d, tasks in enumerate(schedule):
        if position[d] < len(tasks):
            head = tasks[position[d]]
            missing = [str(t) for t in dependencies(head, stages) if t not in done]
            waits.append(f"{_column(schedule, d)} waits at {head} for {' and '.join(missing)}")
    return (
        f"the schedule deadlocks ({'; '.join(waits)}); order each stage's tasks so that "
        "F(s,m) can follow F(s-1,m) and B(s,m) can follow B(s+1,m)"
    )


def _column(schedule: Sequence[Sequence[Task]], device: int) -> str:
    # Name a list by its stage while it holds one stage, as every non-interleaved caller expects.
    one_stage = all(t.stage == device for t in schedule[device])
    return f"stage {device}" if one_stage else f"device {device}"


def validate_schedule(
    schedule: Sequence[Sequence[Task]], stages: int, micro_batches: int, virtual_stages: int = 1
) -> None:
    """Raise ValueError, with a step x device grid, unless the engine can run `schedule`.

    `stages` is the number of device lists (K); the model has K * `virtual_stages` stages, stage s
    on device `device_of(s, K)`. Checked: one list per device; every (stage, micro-batch) has
    exactly one F and one B (and one W if any list holds a W) on the stage's device; each B after
    its F and each W after its B; and no deadlock between devices.
    """
    noun = "stage" if virtual_stages == 1 else "device"
    if len(schedule) != stages:
        raise _invalid(f"the schedule has {len(schedule)} {noun} lists, not {stages}", schedule)
    split = splits_backward(schedule)
    kinds = (FORWARD, INPUT_BACKWARD, WEIGHT) if split else (FORWARD, BACKWARD)
    model_stages = stages * virtual_stages
    for d, tasks in enumerate(schedule):
        own = [s for s in range(model_stages) if device_of(s, stages) == d]
        wanted = {Task(s, kind, m) for s in own for kind in kinds for m in range(micro_batches)}
        _check_list(f"{noun} {d}", list(tasks), wanted, micro_batches, schedule)
    execution_order(schedule, model_stages)


def _check_list(name: str, tasks: list[Task], wanted: set[Task], micro_batches: int, schedule):
    for task in tasks:
        if task not in wanted:
            raise _invalid(
                f"task {task} does not belong in {name}'s list of "
                f"{micro_batches} micro-batches; remove it",
                schedule,
            )
    counts = Counter(tasks)
    for task in sorted(wanted, key=str):
        if counts[task] != 1:
            raise _invalid(
                f"task {task} appears {counts[task]} times; list it exactly once", schedule
            )
    where = {task: i for i, task in enumerate(tasks)}
    for task in sorted(wanted, key=str):
        before = _must_follow(task)
        if before is not None and where[task] < where[before]:
            what = (
                "backward after its forward"
                if task.kind.sends_gradient
                else ("weight gradient after its input backward")
            )
            raise _invalid(f"{task} comes before {before}; put each {what}", schedule)


def _must_follow(task: Task) -> Task | None:
    # The dependency on the task's own stage, so on the same list: checked for a clear sentence
    # before the deadlock search, which would name it less directly.
    if task.kind.sends_gradient:
        return Task(task.stage, FORWARD, task.micro_batch)
    if task.kind is WEIGHT:
        return Task(task.stage, INPUT_BACKWARD, task.micro_batch)
    return None


def _invalid(sentence: str, schedule: Sequence[Sequence[Task]]) -> ValueError:
    # Plain ValueError rather than GpkError: the message carries a multi-line grid, and a bad
    # schedule is a bug in whoever built it, not a plan choice the user can fix in one word.
    return ValueError(f"{sentence}:\n{format_grid(schedule)}")


def max_live_micro_batches(tasks: Iterable[Task], free_at: Pass | str | None = None) -> int:
    """The most micro-batches one device holds activations for at once.

    A (stage, micro-batch) is live from its F until the task that frees it: its W when the
    backward is split (W multiplies the stored layer inputs by the output gradients I left, so
    both stay until W), its B otherwise. `free_at="I"` counts only until I, which is the share a
    split backward needs for the input gradient. Counts chunks, not whole stages: on an
    interleaved device each counts about 1/v of a non-interleaved stage's activations.

    M for gpipe, K - s for 1f1b, min(K, M) on every stage for zb-h1 (1f1b's peak, stage 0's).
    """
    tasks = list(tasks)
    has_weight = any(t.kind is WEIGHT for t in tasks)
    freeing = (INPUT_BACKWARD, WEIGHT) if has_weight else (BACKWARD,)
    if free_at is None:
        free_at = freeing[-1]
    if free_at not in freeing:
        raise GpkError(
            f"free_at={free_at!r} cannot free activations of these tasks; use "
            + " or ".join(repr(str(kind)) for kind in freeing)
        )
    live: set[tuple[int, int]] = set()
    peak = 0
    for task in tasks:
        if task.kind is FORWARD:
            live.add((task.stage, task.micro_batch))
            peak = max(peak, len(live))
        elif task.kind == free_at:
            live.discard((task.stage, task.micro_batch))
    return peak
