"""The compact view of a comparison: what a notebook, the panel and `gpk.history()` display.

The full table has some fifty columns; the compact view keeps the figures that answer "which is
fastest, and did it work", and fits JupyterLab's output area (about 850 px in a 1,280 px window
with the file browser open). One "run" cell names the run and what sets it apart; the step is in
ms with its 95 % interval, the speedup with its own (`interval_cells.py`); pipeline rows get one
bubble cell, memory one cell. Units are in the headers or the cells; a figure that does not
apply is an empty cell, a failed run's reason a line under the table. `cmp.table` stays whole.
How the cells read: `docs/results.md`, "How the views write them".
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from ...backends import of_row, tagged
from ...runs.description.tuning_rules import ONE_STEP_A_CALL_BY
from ...runs.results.below_noise import noise_text
from ..cost_model.compute_source import uncounted
from .cell_text import (
    LINE,
    NBSP,
    NOT_MEASURED,
    NOT_REACHED,
    bytes_text,
    count_text,
    format_number,
    missing,
    ratio_text,
    share_text,
    three_digits,
)
from .comparison_table import format_table
from .interval_cells import SPEEDUP_CI, speedup_text, step_notes, step_text
from .readable_frame import RunFrame
from .row_flags import fills, row_fills
from .terminal_table import several_processes
from .time_to_accuracy import has_convergence


@dataclass(frozen=True)
class Column:
    """One cell per row: its header (given the table), its text, and whether it is shown."""

    header: Callable[[pd.DataFrame], str]
    cell: Callable[[pd.Series], str]
    wanted: Callable[[pd.DataFrame], bool] = lambda df: True


def _has(column: str) -> Callable[[pd.DataFrame], bool]:
    return lambda df: column in df.columns


def _has_other_backend(df: pd.DataFrame) -> bool:
    return "backend" in df.columns and tagged(df["backend"])


def _has_projected(df: pd.DataFrame) -> bool:
    return "projected" in df.columns and bool(df["projected"].astype(bool).any())


def _has_interval(df: pd.DataFrame) -> bool:
    return all(c in df.columns for c in SPEEDUP_CI) and bool(
        df[list(SPEEDUP_CI)].notna().all(axis=1).any()
    )


def _not_all_ok(df: pd.DataFrame) -> bool:
    return bool((df["status"] != "ok").any())


def _uneven_steps(df: pd.DataFrame) -> bool:
    return "timed_steps" in df.columns and _steps_timed(df) is None


def _steps_timed(df: pd.DataFrame) -> int | None:
    """The number of timed steps every finished run rests on, or None when they differ."""
    counts = set(df.loc[df["status"] == "ok", "timed_steps"]) if "timed_steps" in df else set()
    return int(counts.pop()) if len(counts) == 1 else None


def run_text(row: pd.Series, tagged: bool = False) -> str:
    """ "data×2", and on a line under it what sets the run apart: "jax", "mesh 2x2",
    "gpipe, M=4", "auto, 38% ± 4% under M=1", "→ nvlink4"; and under them
    "compute measured on this CPU, not counted" for a projection whose step was not counted."""
    name = f"{row['strategy']}×{int(row['devices'])}"
    details = []
    if tagged:
        details.append(of_row(row.get("backend")).tag)
    mesh = row.get("mesh")
    if isinstance(mesh, str) and mesh and not mesh.startswith("1x"):
        details.append(f"mesh {mesh}")  # "1x4", all on the model axis, goes without saying
    if row_fills(row["strategy"], "schedule") and isinstance(row.get("schedule"), str):
        micro = row.get("micro_batches")
        details.append(row["schedule"] + ("" if missing(micro) else f", M={int(micro)}"))
        if isinstance(row.get("micro_batches_auto"), str) and row["micro_batches_auto"]:
            details.append(row["micro_batches_auto"])  # what auto chose against, by how much
    not_counted = ""
    if bool(row.get("projected", False)):
        # Projected experiment ids end in ":<preset>" (analysis/cost_model/projected_rows.py).
        details.append("→ " + str(row.get("experiment_id", "")).rsplit(":", 1)[-1])
        not_counted = uncounted([row.get("reason")])  # free to wrap: it is long
    text = name + (LINE + " · ".join(d.replace(" ", NBSP) for d in details) if details else "")
    return text + (LINE + not_counted if not_counted else "")


def efficiency_text(row: pd.Series) -> str:
    """ "81%", and "above ideal" under a figure beyond 100 % on devices that share cores: more
    than the devices could give, so an artefact of the measurement, never a gain."""
    text = share_text(row.get("efficiency"))
    above = text and bool(row.get("above_ideal", False))
    return text + LINE + f"above{NBSP}ideal" if above else text


def comm_text(row: pd.Series) -> str:
    if bool(row.get("comm_below_noise", False)):
        return noise_text(row.get("comm_noise_s"))
    if not bool(row.get("comm_measured", True)) and row.get("status") == "ok":
        return NOT_MEASURED  # measure_comm=False: blank would read as none
    return share_text(row.get("comm_share"))


def bubble_text(row: pd.Series) -> str:
    """ "21% (33%)": the bubble measured here, and the theory's (K-1)/(M+K-1)."""
    measured, theory = (
        share_text(row.get("bubble_fraction")),
        share_text(row.get("bubble_theoretical")),
    )
    if not measured:
        return f"({theory})" if theory else ""
    return f"{measured} ({theory})" if theory else measured


def _memory_parts(df: pd.DataFrame) -> bool:
    return fills(df, "state_bytes") or fills(df, "peak_activation_bytes")


def memory_header(df: pd.DataFrame) -> str:
    return "memory per device" if _memory_parts(df) else "peak memory"


def memory_text(row: pd.Series) -> str:
    """The peak, and under it the parameters and optimizer state (`state`) and the activations
    held at the pipeline's peak (`held`) where the row's strategy fills them (its record's
    `columns`: what it divides between devices)."""
    parts = []
    peak = bytes_text(row.get("peak_memory_bytes"))
    for label, column in (("state", "state_bytes"), ("held", "peak_activation_bytes")):
        text = bytes_text(row.get(column)) if row_fills(row["strategy"], column) else ""
        if text:
            parts.append(f"{label} {text}")
    if parts:
        return LINE.join([f"peak {peak}" if peak else "", *parts]).strip(LINE)
    return peak


def target_text(row: pd.Series) -> str:
    """ "0.177 s, epoch 1.37", or "not reached"."""
    if row.get("target_reached") is False:
        return NOT_REACHED
    seconds = row.get("time_to_target_s")
    if missing(seconds):
        return ""
    epoch = row.get("epochs_to_target")
    reached = "" if missing(epoch) else f", epoch {three_digits(float(epoch))}"  # 1.37: mid-epoch
    return f"{three_digits(float(seconds))} s{reached}"


def _cell(column: str, formatter: Callable[[object], str]) -> Callable[[pd.Series], str]:
    return lambda row: formatter(row.get(column))


def _finished(cell: Callable[[pd.Series], str]) -> Callable[[pd.Series], str]:
    """A figure only a finished run has (a partial count would not compare)."""
    return lambda row: cell(row) if row.get("status") == "ok" else ""


def _speedup_header(df: pd.DataFrame) -> str:
    return "speedup (95% CI)" if _has_interval(df) else "speedup"


def _const(text: str) -> Callable[[pd.DataFrame], str]:
    return lambda df: text


COMPACT_COLUMNS: tuple[Column, ...] = (
    Column(_const("run"), lambda row: row["strategy"]),  # replaced per table (backend tags)
    Column(_const("workers"), _cell("workers", format_number), several_processes),
    Column(_const("nodes"), _cell("nodes", format_number), several_processes),
    Column(_const("status"), _cell("status", str), _not_all_ok),
    Column(_const("step (ms)"), step_text),
    Column(_const("steps timed"), _finished(_cell("timed_steps", format_number)), _uneven_steps),
    Column(_const("samples/s"), _cell("throughput_samples_s", count_text)),
    Column(_speedup_header, speedup_text),
    Column(_const("efficiency"), efficiency_text),
    Column(_const("comm share"), comm_text),
    Column(_const("bubble (theory)"), bubble_text, lambda df: fills(df, "bubble_fraction")),
    Column(memory_header, memory_text),
)
CONVERGENCE_COMPACT: tuple[Column, ...] = (
    Column(_const("learning rate"), _cell("learning_rate", format_number)),
    Column(_const("to target"), target_text),
    Column(_const("speedup to target"), _cell("time_to_target_speedup", ratio_text)),
)


def compact_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The compact view as text cells with headers in words (one row per run, table order).

    A cell holding two lines separates them with "\n" (`LINE`); the HTML view breaks there.
    """
    columns = list(COMPACT_COLUMNS)
    if has_convergence(table):
        columns += CONVERGENCE_COMPACT
    rows = table.reset_index(drop=True)
    frame = pd.DataFrame(index=range(len(rows)))
    say_backend = _has_other_backend(rows)
    frame["run"] = [run_text(row, say_backend) for _, row in rows.iterrows()]
    for column in columns[1:]:
        if column.wanted(rows):
            frame[column.header(rows)] = [column.cell(row) for _, row in rows.iterrows()]
    return frame


def failure_lines(table: pd.DataFrame) -> list[str]:
    """ "data×4 oom: <the whole reason>" for every run that did not finish."""
    lines = []
    for _, row in table.iterrows():
        if row["status"] != "ok" and isinstance(row.get("reason"), str) and row["reason"]:
            lines.append(
                f"{row['strategy']}×{int(row['devices'])} {row['status']}: {row['reason']}"
            )
    return lines


def notes_lines(table: pd.DataFrame) -> list[str]:
    """What the figures rest on, said once under the table."""
    notes = []
    steps = _steps_timed(table) if "timed_steps" in table.columns else None
    notes.extend(step_notes(table, steps))
    if "virtual" in table.columns and bool(table["virtual"].astype(bool).any()):
        notes.append(
            "Virtual devices share this machine's cores: the figures show shapes and costs, "
            "not real speedups."
        )
    if "above_ideal" in table.columns and bool(table["above_ideal"].fillna(False).any()):
        notes.append(
            "above ideal: a speedup beyond the device count on devices that share this machine's "
            "cores cannot be a gain; it is noise, or a difference of code path from the baseline."
        )
    if _has_projected(table):
        notes.append(
            "projected onto: rows a cost model predicted for that hardware from the measured "
            "ones, not measured; their speedups are against the projected single device."
        )
    tuned = _tuned_note(table)
    if tuned:
        notes.append(tuned)
    if "comm_below_noise" in table.columns and bool(table["comm_below_noise"].any()):
        notes.append(
            'comm share: exposed all-reduce time over the step; "below noise" where it was '
            "smaller than its own scatter between repeated measurements."
        )
    return notes


def _tuned_note(table: pd.DataFrame) -> str:
    """What the runs trained with, when some ran several steps per execution or with XLA; where
    rows differ, which ran how many, and why a row whose loop takes one step per call did."""
    if "steps_per_execution" not in table.columns:
        return ""
    spe = table["steps_per_execution"].dropna()
    used = table["jit_compile"] == True if "jit_compile" in table.columns else None  # noqa: E712
    xla = used is not None and bool(used.fillna(False).any())
    if not len(spe) or (int(spe.max()) <= 1 and not xla):
        return ""
    xla_words = "; XLA on in some runs" if xla else ""
    if len(set(spe)) == 1:
        return (
            f"steps per execution: {int(spe.iloc[0])} (tune or yours; a step's time is its "
            f"execution's time / its steps){xla_words}."
        )
    return (
        f"steps per execution: {'; '.join(_steps_per_execution_groups(table))}. A step's time "
        "is its execution's time / its steps, so a call's own cost falls whole on a row of one "
        f"step per call and is shared among the steps of the others{xla_words}."
    )


def _steps_per_execution_groups(table: pd.DataFrame) -> list[str]:
    """ "4 for single×1", "1 for multiworker×2 (strategy='multiworker': its own loop takes one
    step per call)": the runs of each count, most first, with the reason of those whose loop
    cannot take more."""
    groups: dict[int, list[str]] = {}
    for _, row in table.iterrows():
        if missing(row["steps_per_execution"]):
            continue
        name = f"{row['strategy']}×{int(row['devices'])}"
        why = str(row.get("steps_per_execution_why") or "")
        if why.startswith(ONE_STEP_A_CALL_BY):
            name += f" ({why.removeprefix(ONE_STEP_A_CALL_BY)})"
        groups.setdefault(int(row["steps_per_execution"]), []).append(name)
    return [f"{n} for {_listed(names)}" for n, names in sorted(groups.items(), reverse=True)]


def _listed(names: list[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def compact_html(table: pd.DataFrame) -> str:
    """The compact view as an HTML table (class `gpk-table`), failures and notes under it."""
    if table.empty:
        return "<p class='gpk-table'>(no runs)</p>"
    cells = compact_frame(table).map(_html_cell)
    body = _STYLE + cells.to_html(index=False, classes="gpk-table", border=0, escape=False)
    lines = [f"<li>{html.escape(line)}</li>" for line in failure_lines(table)]
    failures = f"<ul class='gpk-reasons'>{''.join(lines)}</ul>" if lines else ""
    notes = "".join(
        f"<p class='gpk-note'><small>{html.escape(n)}</small></p>" for n in notes_lines(table)
    )
    return body + failures + notes


def _html_cell(text: str) -> str:
    """A cell's text escaped; a second line smaller, under the first; "below noise" whole on
    one line and its noise under it, so the column stays narrow and the words whole."""
    text = html.escape(text).replace("below noise (", "below&nbsp;noise" + LINE + "(")
    first, _, rest = text.partition(LINE)
    if not rest:
        return first
    return f"{first}<br><span class='gpk-sub'>{rest.replace(LINE, '<br>')}</span>"


# Narrower cells than a notebook's default, numbers right-aligned on one line, words free to
# wrap between words only (never inside one).
_STYLE = (
    "<style>table.gpk-table{font-size:12px}"
    "table.gpk-table th,table.gpk-table td{padding:0.3em 0.45em;white-space:normal;"
    "overflow-wrap:normal;word-break:normal}"
    "table.gpk-table td:first-child,table.gpk-table th:first-child{text-align:left}"
    "table.gpk-table .gpk-sub{font-size:11px;color:#666}</style>"
)


class RunTable(RunFrame):
    """A full comparison table that displays as its compact view (what `gpk.history()` returns).

    Every column is there (`list(t.columns)`, `t[...]`, `t.to_csv()`); only its display is short.
    Anything computed from it is a `RunFrame`: shown whole, its figures readable.
    """

    @property
    def _constructor(self) -> type[RunFrame]:
        return RunFrame

    def _repr_html_(self) -> str:
        return compact_html(pd.DataFrame(self))

    def __repr__(self) -> str:
        return format_table(pd.DataFrame(self))
