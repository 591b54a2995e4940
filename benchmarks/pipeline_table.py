"""The pipeline schedules' tables: plain numbers in, text out, and the notes printed under them.

One table has a line per case; the other sets the engine's cost per task on each backend side
by side, a line per (engine, schedule, K, M)."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline_runs import BACKENDS, Row
from text_cells import fraction_cell, mib_cell, number_cell, ratio_cell

CPU_STORY = (
    "Virtual CPU devices share the machine's {cores} cores: stages run in threads that take turns "
    "on the same cores, so pipelining cannot beat one device here, and the measured bubble is not "
    "idle hardware: the cores stay busy with another stage's thread. The simulated columns "
    "replay each stage's median measured task times on K independent devices (no transfer time): "
    "a model of real hardware, not a measurement."
)

LEGEND = (
    "Medians over the steps after warm-up. naive/this: naive's step time (same K) / this one's, "
    ">1 = faster. bubble measured: 1 - busy / (K x task span) over the timed steps, as the kit "
    "computes it (a task's time starts once its input has arrived). "
    "task span: first task start to last task end in a timed step; outside tasks: "
    "step - task span (optimizer updates, splitting the batch, the data). work alone: the sum of "
    "task times of one of the kit's serial passes (run after training, weights restored), each "
    "task measured alone. SIMULATED step: the schedule replayed on K independent devices with "
    "those task times (medians per stage and kind over three passes), ending with each stage's "
    "measured update; no transfer time. act. held: bytes of the layer outputs of the "
    "micro-batches one stage holds at its peak (peak live micro-batches x one micro-batch's "
    "outputs), max over stages; act. 1f1b/gpipe: 1f1b's figure over gpipe's at the same K and M. "
    "Every ratio is within one backend. engine eager is recompute=False: eager tasks with their "
    "tapes kept on TensorFlow, compiled tasks whose forward keeps its VJP on JAX."
)

TASK_COST_LEGEND = (
    "The engine's cost per task: a task's time beyond its forward or backward call and its copy "
    "across the cut (the kit's task_overhead_s), median over the tasks of the timed steps "
    "(training: stages sharing the cores) and of the serial passes (alone: one task at a time); "
    "outside tasks: per step, the time outside every task (splitting the batch, the updates). "
    "Both runners close a task's call when it returns with its outputs ready, so on both the "
    "figure holds the runner's bookkeeping after the call (sending on, counting live "
    "micro-batches) and before it (receiving, placing the input)."
)

HEADER = (
    "backend",
    "engine",
    "schedule",
    "K",
    "M",
    "step ms (IQR)",
    "naive/this",
    "task span ms",
    "outside tasks ms",
    "task overhead ms",
    "bubble measured",
    "bubble SIMULATED",
    "bubble theory",
    "work alone ms",
    "work alone / naive's",
    "SIMULATED step ms",
    "SIMULATED naive/this",
    "act. held max/stage",
    "live micro-batches per stage",
    "act. 1f1b/gpipe",
)


def table_lines(rows: Sequence[Row]) -> list[str]:
    """A Markdown table (readable as is in a terminal) with one line per case."""
    naive = {
        (r.case.backend, r.case.engine, r.case.stages): r
        for r in rows
        if r.case.schedule == "naive" and r.status == "ok"
    }
    gpipe = {
        (r.case.backend, r.case.engine, r.case.stages, r.case.micro_batches): r
        for r in rows
        if r.case.schedule == "gpipe" and r.status == "ok"
    }
    cells = [list(HEADER)]
    for r in rows:
        if r.status != "ok":
            cells.append(_case_cells(r) + [f"{r.status}: {r.reason}"])
            cells[-1] += [""] * (len(HEADER) - len(cells[-1]))
            continue
        base = naive.get((r.case.backend, r.case.engine, r.case.stages))
        twin = gpipe.get((r.case.backend, r.case.engine, r.case.stages, r.case.micro_batches))
        act_ratio = None
        if r.case.schedule == "1f1b" and twin and twin.peak_activation_bytes:
            act_ratio = r.peak_activation_bytes / twin.peak_activation_bytes
        cells.append(
            [
                r.case.backend,
                r.case.engine,
                r.case.schedule,
                str(r.case.stages),
                str(r.case.micro_batches),
                f"{r.step_s * 1e3:.1f} ({r.spread_s * 1e3:.1f})",
                ratio_cell(base.step_s if base else None, r.step_s),
                number_cell(r.task_span_s, "{:.1f}", 1e3),
                number_cell(r.outside_tasks_s, "{:.1f}", 1e3),
                number_cell(r.task_overhead_s, "{:.2f}", 1e3),
                fraction_cell(r.bubble_measured),
                fraction_cell(r.bubble_simulated),
                fraction_cell(r.bubble_theoretical),
                number_cell(r.work_alone_s, "{:.1f}", 1e3),
                ratio_cell(r.work_alone_s, base.work_alone_s if base else None),
                number_cell(r.simulated_step_s, "{:.1f}", 1e3),
                ratio_cell(base.simulated_step_s if base else None, r.simulated_step_s),
                mib_cell(r.peak_activation_bytes),
                ",".join(str(n) for n in r.live),
                number_cell(act_ratio, "{:.2f}"),
            ]
        )
    return _markdown(cells)


def task_cost_lines(rows: Sequence[Row]) -> list[str]:
    """The engine's cost per task on each backend side by side, one line per (engine, schedule,
    K, M): per task in training and alone, and outside tasks per step."""
    backends = [b for b in BACKENDS if any(r.case.backend == b for r in rows)]
    found = {(r.case.backend, *_key(r)): r for r in rows if r.status == "ok"}
    header = ["engine", "schedule", "K", "M"]
    for backend in backends:
        header += [
            f"{backend} per task, training µs",
            f"{backend} per task, alone µs",
            f"{backend} outside tasks ms",
        ]
    cells = [header]
    for key in dict.fromkeys(_key(r) for r in rows):
        sides = [found.get((backend, *key)) for backend in backends]
        line = [key[0], key[1], str(key[2]), str(key[3])]
        for side in sides:
            line += [
                number_cell(side and side.task_overhead_s, "{:.0f}", 1e6),
                number_cell(side and side.task_overhead_alone_s, "{:.0f}", 1e6),
                number_cell(side and side.outside_tasks_s, "{:.1f}", 1e3),
            ]
        cells.append(line)
    return _markdown(cells)


def stage_task_lines(rows: Sequence[Row]) -> list[str]:
    """What ran each engine's tasks on each backend, in the kit's words."""
    said = {
        (r.case.backend, r.case.engine): r.stage_tasks
        for r in rows
        if r.status == "ok" and r.stage_tasks
    }
    return [f"{backend} {engine}: {text}" for (backend, engine), text in said.items()]


def _key(r: Row) -> tuple[str, str, int, int]:
    return (r.case.engine, r.case.schedule, r.case.stages, r.case.micro_batches)


def _case_cells(r: Row) -> list[str]:
    return [
        r.case.backend,
        r.case.engine,
        r.case.schedule,
        str(r.case.stages),
        str(r.case.micro_batches),
    ]


def _markdown(cells: list[list[str]]) -> list[str]:
    widths = [max(len(row[c]) for row in cells) for c in range(len(cells[0]))]
    lines = [_line(row, widths) for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines


def _line(row: Sequence[str], widths: Sequence[int]) -> str:
    return "| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |"


def stage_lines(rows: Sequence[Row]) -> list[str]:
    """How the kit cut the model: layers and parameter bytes per stage, once per backend and K."""
    lines, seen = [], set()
    for r in rows:
        if r.status != "ok" or (r.case.backend, r.case.stages) in seen:
            continue
        seen.add((r.case.backend, r.case.stages))
        parts = ", ".join(
            f"{n} layers / {mib_cell(b)}" for n, b in zip(r.layers, r.parameter_bytes, strict=True)
        )
        lines.append(f"{r.case.backend} K={r.case.stages}: {parts}")
    return lines
