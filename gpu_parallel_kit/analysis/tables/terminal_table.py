"""The terminal table (`format_table`, which analysis/tables/comparison_table.py re-exports): the
columns that answer "which is fastest", figures for people, reasons cut to their column between
words.

A terminal has no second line in a cell and about 140 characters a line, so the step is in ms,
speedup carries its interval where the table has one ("too few steps to tell" where it is too
wide to read, with the fix under the table), shares are in %, and a reason is cut at a word
boundary with "…" (the whole reason is in the table).
"""

from __future__ import annotations

import math
import textwrap

import pandas as pd
from tabulate import tabulate

from ...backends import tagged
from ..cost_model.compute_source import uncounted
from .cell_text import (
    TOO_FEW_STEPS,
    TOO_FEW_STEPS_NOTE,
    display_frame,
    mark_below_noise,
    mark_not_measured,
    mark_not_reached,
    ms_text,
    ratio_text,
    share_text,
)
from .time_to_accuracy import has_convergence

REASON_WIDTH = 30
# Terminal view: (table column, short header).
TERMINAL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("strategy", "strategy"),
    ("devices", "devices"),
    ("virtual", "virtual"),
    ("schedule", "schedule"),
    ("micro_batches", "M"),
    ("global_batch", "batch"),
    ("status", "status"),
    ("step_time_s", "step_ms"),
    ("throughput_samples_s", "samples/s"),
    ("speedup", "speedup"),
    ("efficiency", "eff"),
    ("comm_share", "comm"),  # a share of the step, like eff; "below noise (±x ms)" under noise
    ("peak_memory_bytes", "peak_MiB"),
    ("reason", "reason"),
)
TERMINAL_CONVERGENCE: tuple[tuple[str, str], ...] = (
    ("learning_rate", "lr"),
    ("time_to_target_s", "to_target_s"),
    ("epochs_to_target", "epochs"),
    ("time_to_target_speedup", "tt_speedup"),
)
SPEEDUP_CI = ("speedup_ci_low", "speedup_ci_high")  # added by comparisons measured in rounds


def for_people(shown: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """The step in ms, speedup as "1.62×" with its interval where the table has one, shares
    in %: the figures a reader compares, at the precision they were measured to."""
    low, high = ((df[c] if c in df.columns else pd.Series(math.nan, df.index)) for c in SPEEDUP_CI)
    formats = {
        "step_time_s": lambda: df["step_time_s"].map(ms_text),
        "speedup": lambda: [ratio_text(*v) for v in zip(df["speedup"], low, high, strict=True)],
        "efficiency": lambda: df["efficiency"].map(share_text),
        "comm_share": lambda: df["comm_share"].map(share_text),
    }
    for column, cells in formats.items():
        if column in shown.columns:
            shown[column] = list(cells())
    return shown


def shorten(text: str) -> str:
    """The reason cut to its column at a word boundary, never inside a word; a projection's
    whose compute was not counted stays whole, so the table says so."""
    if len(text) <= REASON_WIDTH or uncounted([text]):
        return text
    cut = text[: REASON_WIDTH - 1]
    if " " in cut and not text[REASON_WIDTH - 1].isspace():
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "…"


def format_table(df: pd.DataFrame) -> str:
    """A compact plain-text table for terminals: the columns that answer "which is fastest".

    Fits about 140 characters at worst (about 160 with a communication figure below its noise,
    about 175 with a target too, whose columns come before the reason); long failure reasons are
    cut (the full text is in `df`).
    """
    if df.empty:
        return "(no runs)"
    columns = list(TERMINAL_COLUMNS)
    # What tune (or the user) chose, shown once rows carry it; XLA only when a run used it.
    tuned = [("steps_per_execution", "spe")]
    if "steps_per_execution" not in df.columns or df["steps_per_execution"].isna().all():
        tuned = []
    elif (df["jit_compile"] == True).fillna(False).any():  # noqa: E712
        tuned.append(("jit_compile", "xla"))
    columns[-1:-1] = tuned
    if several_processes(df):  # where each row ran: its processes, and the nodes they ran on
        at = columns.index(("devices", "devices"))
        columns[at:at] = [("workers", "workers"), ("nodes", "nodes")]
    if "backend" in df.columns and tagged(df["backend"]):
        columns.insert(columns.index(("strategy", "strategy")), ("backend", "backend"))
    if "mesh" in df.columns and (df["mesh"] != "").any():
        columns.insert(columns.index(("schedule", "schedule")), ("mesh", "mesh"))
    if has_convergence(df):
        columns[-1:-1] = TERMINAL_CONVERGENCE
    chosen = [(column, header) for column, header in columns if column in df.columns]
    shown = for_people(display_frame(df[[column for column, _ in chosen]]), df)
    shown = mark_not_reached(shown, df)
    shown = mark_not_measured(mark_below_noise(shown, df), df)
    if "reason" in df.columns:
        shown["reason"] = shown["reason"].map(shorten)
    align = ["right" if is_numeric(df, column) else "left" for column, _ in chosen]
    # The header as the first row: as `headers=`, tabulate pads each by two spaces, ~30 characters
    # over a terminal's width. disable_numparse: cells are formatted; tabulate must not re-round.
    table = tabulate(
        [[header for _, header in chosen], *shown.itertuples(index=False)],
        tablefmt="plain",
        disable_numparse=True,
        colalign=align,
    )
    if "speedup" in shown.columns and shown["speedup"].str.contains(TOO_FEW_STEPS).any():
        table += "\n" + textwrap.fill(TOO_FEW_STEPS_NOTE, 100)
    return table


def several_processes(df: pd.DataFrame) -> bool:
    """Whether a row ran on several processes or nodes (multiworker, a Slurm step of several
    tasks): the views then give every row its workers and nodes, so each says where it ran."""
    return any(
        column in df.columns and bool((df[column].fillna(1) > 1).any())
        for column in ("workers", "nodes")
    )


def is_numeric(df: pd.DataFrame, column: str) -> bool:
    """Right-aligned in the text tables: numbers, not flags."""
    dtype = df[column].dtype
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
