"""The terminal table's cells (analysis/tables.py `format_table`): figures for people, reasons
cut to their column between words.

A terminal has no second line in a cell and about 140 characters a line, so the step is in ms,
speedup carries its interval where the table has one, shares are in %, and a reason is cut at a
word boundary with "…" (the whole reason is in the table).
"""

from __future__ import annotations

import math

import pandas as pd

from .cells import ms_text, ratio_text, share_text

REASON_WIDTH = 30
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
    """The reason cut to its column at a word boundary, never inside a word."""
    if len(text) <= REASON_WIDTH:
        return text
    cut = text[: REASON_WIDTH - 1]
    if " " in cut and not text[REASON_WIDTH - 1].isspace():
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "…"
