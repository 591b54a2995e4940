"""A schedule, or its replay, as a text grid: one column per device, one row per step or time.

This is what an invalid schedule's error prints, and what a reader compares with a paper's figure.
"""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from .tasks import Task


def format_grid(timed_or_schedule) -> str:
    """A text grid with one column per device and one row per step or time slot.

    Given a schedule, row i holds each device's i-th task. Given timed tasks (anything with
    `start`, `end` and `device`, such as `simulation.simulate`'s output), a row starts at each
    time a task starts or ends and shows what every device is running then; "" is idle. Columns
    are headed "stage d" while each device holds one stage, "device d" once it holds several.
    """
    items = list(timed_or_schedule)
    if items and hasattr(items[0], "start"):
        columns = max(_device(t) for t in items) + 1
        one_stage_each = all(t.stage == _device(t) for t in items)
        header, rows = "time", _timed_rows(items, columns)
    else:
        columns = len(items)
        one_stage_each = all(t.stage == d for d, tasks in enumerate(items) for t in tasks)
        header, rows = "step", _step_rows(items)
    label = "stage" if one_stage_each else "device"
    headers = [header, *(f"{label} {d}" for d in range(columns))]
    # Left-aligned text throughout: a step or a time labels a row, "1F0" is not a number. The
    # header goes in as the first row, so tabulate does not pad it apart from the cells below.
    return tabulate([headers, *rows], tablefmt="plain", disable_numparse=True, stralign="left")


def _device(timed) -> int:
    # Timed tasks from before devices were recorded carry none: their device is their stage.
    device = getattr(timed, "device", None)
    return timed.stage if device is None else device


def _text(task) -> str:
    return f"{task.stage}{task.kind}{task.micro_batch}"


def _step_rows(schedule: Sequence[Sequence[Task]]) -> list[list[str]]:
    depth = max((len(tasks) for tasks in schedule), default=0)
    return [
        [str(step), *(_text(tasks[step]) if step < len(tasks) else "" for tasks in schedule)]
        for step in range(depth)
    ]


def _timed_rows(timed: list, columns: int) -> list[list[str]]:
    times = sorted({t.start for t in timed} | {t.end for t in timed})
    rows = []
    for at in times:
        # A zero-length task still gets a cell, in the row where it starts (and ends).
        cells = [
            ",".join(
                _text(t)
                for t in timed
                if _device(t) == d and (t.start <= at < t.end or t.start == t.end == at)
            )
            for d in range(columns)
        ]
        rows.append([f"{at:g}", *cells])
    if rows and not any(rows[-1][1:]):
        rows.pop()  # the last boundary is the end of the step, not a slot
    return rows
