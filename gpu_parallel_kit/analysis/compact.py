"""The compact view of a comparison: what a notebook, the panel and `gpk.history()` display.

The full table has some fifty columns, far wider than a notebook. The compact view keeps the
figures that answer "which is fastest, and did it work" (strategy, devices, status, step time,
the steps it rests on, throughput, speedup, efficiency, communication share, peak memory) and adds
only the columns that matter for the strategies present: pipeline figures where there are model
runs, workers where a run had several, time to target where a run had a target. A failed run's
reason is written in full on a line under the table. `cmp.table` stays whole.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import pandas as pd

from ..runs.noise import noise_text
from .cells import NOT_MEASURED, NOT_REACHED, figure_text, missing
from .convergence import has_convergence
from .flags import fills
from .tables import format_table

_MIB = 2**20
# (column, header, when shown: None always, else a test on the table)
Column = tuple[str, str, Callable[[pd.DataFrame], bool] | None]


def _owned_by_a_row(column: str) -> Callable[[pd.DataFrame], bool]:
    """Shown when a row's strategy fills `column` (its record's `columns`)."""
    return lambda df: fills(df, column)


def _has_workers(df: pd.DataFrame) -> bool:
    return "workers" in df.columns and bool((df["workers"] > 1).any())


def _has_jax(df: pd.DataFrame) -> bool:
    return "backend" in df.columns and bool((df["backend"] != "tensorflow").any())


def _has_projected(df: pd.DataFrame) -> bool:
    return "projected" in df.columns and bool(df["projected"].astype(bool).any())


COMPACT_COLUMNS: tuple[Column, ...] = (
    ("backend", "backend", _has_jax),
    ("strategy", "strategy", None),
    ("projected", "projected onto", _has_projected),
    ("workers", "workers", _has_workers),
    ("devices", "devices", None),
    ("mesh", "mesh (data×model)", _owned_by_a_row("mesh")),
    ("schedule", "schedule", _owned_by_a_row("schedule")),
    ("micro_batches", "micro-batches", _owned_by_a_row("micro_batches")),
    ("status", "status", None),
    ("step_time_s", "step (ms)", None),
    ("step_time_spread_s", "± (ms)", None),
    ("timed_steps", "steps timed", None),
    ("throughput_samples_s", "samples/s", None),
    ("speedup", "speedup", None),
    ("efficiency", "efficiency", None),
    ("comm_share", "comm share", None),
    ("bubble_fraction", "bubble", _owned_by_a_row("bubble_fraction")),
    ("bubble_theoretical", "bubble (theory)", _owned_by_a_row("bubble_theoretical")),
    ("state_bytes", "state (MiB)", _owned_by_a_row("state_bytes")),
    ("peak_activation_bytes", "activations held (MiB)", _owned_by_a_row("peak_activation_bytes")),
    ("peak_memory_bytes", "peak memory (MiB)", None),
)
CONVERGENCE_COMPACT: tuple[Column, ...] = (
    ("learning_rate", "learning rate", None),
    ("time_to_target_s", "time to target (s)", None),
    ("epochs_to_target", "epochs to target", None),
    ("time_to_target_speedup", "speedup to target", None),
)


def compact_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The compact view as text cells with headers in words (one row per run, table order)."""
    columns = list(COMPACT_COLUMNS)
    if has_convergence(table):
        columns += CONVERGENCE_COMPACT
    frame = pd.DataFrame(index=range(len(table)))
    rows = table.reset_index(drop=True)
    for column, header, wanted in columns:
        if column not in rows.columns or (wanted is not None and not wanted(rows)):
            continue
        frame[header] = [_cell(column, row) for _, row in rows.iterrows()]
    return frame


def _cell(column: str, row: pd.Series) -> str:
    value = row[column]
    if column == "projected":
        # Projected experiment ids end in ":<preset>" (analysis/projection.py).
        return str(row.get("experiment_id", "")).rsplit(":", 1)[-1] if value else ""
    if column == "comm_share":
        if bool(row.get("comm_below_noise", False)):
            return noise_text(row.get("comm_noise_s"))
        if not bool(row.get("comm_measured", True)) and row.get("status") == "ok":
            return NOT_MEASURED  # measure_comm=False: blank would read as none
        return "" if missing(value) else f"{value:.0%}"
    if column == "time_to_target_s" and row.get("target_reached") is False:
        return NOT_REACHED
    if missing(value):
        return ""
    if column == "step_time_s":
        return figure_text(value * 1000)
    if column == "step_time_spread_s":
        return f"{value * 1000:.2g}"  # a spread needs no more digits than this
    if column in ("bubble_fraction", "bubble_theoretical"):
        return f"{value:.0%}"
    if column in ("state_bytes", "peak_memory_bytes", "peak_activation_bytes"):
        return figure_text(value / _MIB)
    if column == "efficiency":
        return f"{value:.0%}"
    if column == "speedup":
        return f"{value:.3g}"
    if isinstance(value, float):
        return figure_text(value)
    return str(value)


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
    if "virtual" in table.columns and bool(table["virtual"].astype(bool).any()):
        notes.append(
            "Virtual devices share this machine's cores: the figures show shapes and costs, "
            "not real speedups."
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
    """What the runs trained with, when some ran several steps per execution or with XLA."""
    if "steps_per_execution" not in table.columns:
        return ""
    spe = table["steps_per_execution"].dropna()
    used = table["jit_compile"] == True if "jit_compile" in table.columns else None  # noqa: E712
    xla = used is not None and bool(used.fillna(False).any())
    if not len(spe) or (int(spe.max()) <= 1 and not xla):
        return ""
    counts = ", ".join(str(int(n)) for n in sorted(set(spe)))
    return (
        f"steps per execution: {counts} (tune or yours; a step's time is its execution's time / "
        "its steps)" + ("; XLA on in some runs" if xla else "") + "."
    )


def compact_html(table: pd.DataFrame) -> str:
    """The compact view as an HTML table (class `gpk-table`), failures and notes under it."""
    if table.empty:
        return "<p class='gpk-table'>(no runs)</p>"
    cells = compact_frame(table).map(html.escape)
    # "below noise" on one line and its noise under it: the column stays narrow, the words whole.
    cells = cells.map(lambda text: text.replace("below noise (", "below&nbsp;noise<br>("))
    body = _STYLE + cells.to_html(index=False, classes="gpk-table", border=0, escape=False)
    lines = [f"<li>{html.escape(line)}</li>" for line in failure_lines(table)]
    failures = f"<ul class='gpk-reasons'>{''.join(lines)}</ul>" if lines else ""
    notes = "".join(
        f"<p class='gpk-note'><small>{html.escape(n)}</small></p>" for n in notes_lines(table)
    )
    return body + failures + notes


# Narrower cells than a notebook's default, so that a view with pipeline or time-to-target
# columns still fits the notebook's width.
_STYLE = (
    "<style>table.gpk-table{font-size:12px}"
    "table.gpk-table th,table.gpk-table td{padding:0.3em 0.45em;white-space:normal}</style>"
)


class RunTable(pd.DataFrame):
    """A full comparison table that displays as its compact view (what `gpk.history()` returns).

    Every column is there (`list(t.columns)`, `t[...]`, `t.to_csv()`); only its display is short.
    Anything computed from it is a plain DataFrame, shown whole.
    """

    @property
    def _constructor(self):
        return pd.DataFrame

    def _repr_html_(self) -> str:
        return compact_html(pd.DataFrame(self))

    def __repr__(self) -> str:
        return format_table(pd.DataFrame(self))
