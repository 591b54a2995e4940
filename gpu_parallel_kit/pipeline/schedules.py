"""Pipeline schedules as plain data: for each stage, the order of its forward and backward tasks.

A schedule is a tuple with one ordered tuple of `Task`s per stage. The pipeline engine runs one
thread per stage that executes exactly that stage's list, the simulator replays the same lists on
paper, and the timeline plot draws them, so all three agree by construction. Nothing here imports
TensorFlow: schedules are built, checked and printed in milliseconds.

Dependencies between tasks (the engine waits for these, the simulator models them):
F(s, m) after F(s-1, m); B(s, m) after B(s+1, m) and after F(s, m) on the same stage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import GpkError

FORWARD = "F"
BACKWARD = "B"
SCHEDULES = ("naive", "gpipe", "1f1b")

_TASK_TEXT = re.compile(r"(\d+)([FB])(\d+)")


@dataclass(frozen=True)
class Task:
    """One forward or backward pass of one micro-batch through one stage."""

    stage: int  # index of the stage (and of its device within the run), from 0
    kind: str  # "F" (forward) or "B" (backward)
    micro_batch: int  # index of the micro-batch within the global batch, from 0

    def __post_init__(self) -> None:
        if self.kind not in (FORWARD, BACKWARD):
            raise GpkError(f"task kind {self.kind!r} is not known; use 'F' or 'B'")
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
                f"cannot read task {text!r}; write stage, F or B, micro-batch, e.g. '1F0'"
            )
        stage, kind, micro_batch = match.groups()
        return cls(int(stage), kind, int(micro_batch))


Schedule = tuple[tuple[Task, ...], ...]


def build_schedule(name: str, stages: int, micro_batches: int) -> Schedule:
    """The task order of each stage for the named schedule (one of `SCHEDULES`)."""
    _check_count("stages", stages)
    _check_count("micro_batches", micro_batches)
    if name not in SCHEDULES:
        known = ", ".join(repr(n) for n in SCHEDULES)
        raise GpkError(f"schedule={name!r} is not known; use one of {known}")
    if name == "naive" and micro_batches != 1:
        raise GpkError(
            "schedule='naive' runs one micro-batch; use micro_batches=1, "
            f"or schedule='gpipe' for {micro_batches}"
        )
    build = _one_f_one_b if name == "1f1b" else _gpipe  # naive is gpipe with one micro-batch
    return tuple(tuple(build(stage, stages, micro_batches)) for stage in range(stages))


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise GpkError(f"{name}={value} is too few; use {name}=1 or more")


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


def dependencies(task: Task, stages: int) -> tuple[Task, ...]:
    """The tasks that must end before `task` may start, in a pipeline of `stages` stages."""
    m = task.micro_batch
    if task.kind == FORWARD:
        return () if task.stage == 0 else (Task(task.stage - 1, FORWARD, m),)
    own_forward = Task(task.stage, FORWARD, m)
    if task.stage == stages - 1:
        return (own_forward,)
    return (Task(task.stage + 1, BACKWARD, m), own_forward)


def execution_order(schedule: Sequence[Sequence[Task]]) -> list[Task]:
    """All tasks in one order that keeps each stage's order and every dependency.

    Replays the stages in lock-step and raises ValueError (with the grid) when no stage can
    move, which is exactly when the engine's threads would wait for each other forever.
    """
    stages = len(schedule)
    position = [0] * stages
    done: set[Task] = set()
    order: list[Task] = []
    while len(order) < sum(len(tasks) for tasks in schedule):
        moved = False
        for s, tasks in enumerate(schedule):
            while position[s] < len(tasks) and done.issuperset(
                dependencies(tasks[position[s]], stages)
            ):
                done.add(tasks[position[s]])
                order.append(tasks[position[s]])
                position[s] += 1
                moved = True
        if not moved:
            raise _invalid(_deadlock_sentence(schedule, position, done), schedule)
    return order


def _deadlock_sentence(schedule: Sequence[Sequence[Task]], position: list[int], done) -> str:
    waits = []
    for s, tasks in enumerate(schedule):
        if position[s] < len(tasks):
            head = tasks[position[s]]
            missing = [str(d) for d in dependencies(head, len(schedule)) if d not in done]
            waits.append(f"stage {s} waits at {head} for {' and '.join(missing)}")
    return (
        f"the schedule deadlocks ({'; '.join(waits)}); order each stage's tasks so that "
        "F(s,m) can follow F(s-1,m) and B(s,m) can follow B(s+1,m)"
    )


def validate_schedule(schedule: Sequence[Sequence[Task]], stages: int, micro_batches: int) -> None:
    """Raise ValueError, with a step x stage grid, unless the engine can run `schedule`.

    Checked: one task list per stage, every (stage, F/B, micro-batch) exactly once on its own
    stage, each backward after its own forward, and no deadlock between stages.
    """
    if len(schedule) != stages:
        raise _invalid(f"the schedule has {len(schedule)} stage lists, not {stages}", schedule)
    for s, tasks in enumerate(schedule):
        _check_stage(s, list(tasks), micro_batches, schedule)
    execution_order(schedule)


def _check_stage(stage: int, tasks: list[Task], micro_batches: int, schedule) -> None:
    wanted = {Task(stage, kind, m) for kind in (FORWARD, BACKWARD) for m in range(micro_batches)}
    for task in tasks:
        if task not in wanted:
            raise _invalid(
                f"task {task} does not belong in stage {stage}'s list of "
                f"{micro_batches} micro-batches; remove it",
                schedule,
            )
    for task in sorted(wanted, key=str):
        if tasks.count(task) != 1:
            raise _invalid(
                f"task {task} appears {tasks.count(task)} times; list it exactly once", schedule
            )
    for m in range(micro_batches):
        if tasks.index(Task(stage, BACKWARD, m)) < tasks.index(Task(stage, FORWARD, m)):
            raise _invalid(
                f"{stage}B{m} comes before {stage}F{m}; put each backward after its forward",
                schedule,
            )


def _invalid(sentence: str, schedule: Sequence[Sequence[Task]]) -> ValueError:
    # Plain ValueError rather than GpkError: the message carries a multi-line grid, and a bad
    # schedule is a bug in whoever built it, not a plan choice the user can fix in one word.
    return ValueError(f"{sentence}:\n{format_grid(schedule)}")


def format_grid(timed_or_schedule) -> str:
    """A text grid with one column per stage and one row per step or time slot.

    Given a schedule, row i holds each stage's i-th task. Given timed tasks (anything with
    `start` and `end`, such as `pipeline_sim.simulate`'s output), a row starts at each time a
    task starts or ends and shows what every stage is running then; "" is idle.
    """
    items = list(timed_or_schedule)
    if items and hasattr(items[0], "start"):
        stages = max(t.stage for t in items) + 1
        header, rows = "time", _timed_rows(items, stages)
    else:
        stages = len(items)
        header, rows = "step", _step_rows(items)
    table = [[header, *(f"stage {s}" for s in range(stages))], *rows]
    widths = [max(len(row[c]) for row in table) for c in range(stages + 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in table]
    return "\n".join(line.rstrip() for line in lines)


def _text(task) -> str:
    return f"{task.stage}{task.kind}{task.micro_batch}"


def _step_rows(schedule: Sequence[Sequence[Task]]) -> list[list[str]]:
    depth = max((len(tasks) for tasks in schedule), default=0)
    return [
        [str(step), *(_text(tasks[step]) if step < len(tasks) else "" for tasks in schedule)]
        for step in range(depth)
    ]


def _timed_rows(timed: list, stages: int) -> list[list[str]]:
    times = sorted({t.start for t in timed} | {t.end for t in timed})
    rows = []
    for at in times:
        # A zero-length task still gets a cell, in the row where it starts (and ends).
        cells = [
            ",".join(
                _text(t)
                for t in timed
                if t.stage == s and (t.start <= at < t.end or t.start == t.end == at)
            )
            for s in range(stages)
        ]
        rows.append([f"{at:g}", *cells])
    if rows and not any(rows[-1][1:]):
        rows.pop()  # the last boundary is the end of the step, not a slot
    return rows


def max_live_micro_batches(tasks: Iterable[Task]) -> int:
    """The most micro-batches one stage holds activations for at once (forward run, backward not).

    This is what sets a stage's activation memory: M for gpipe, at most K - s for 1f1b.
    """
    live: set[int] = set()
    peak = 0
    for task in tasks:
        if task.kind == FORWARD:
            live.add(task.micro_batch)
            peak = max(peak, len(live))
        else:
            live.discard(task.micro_batch)
    return peak
