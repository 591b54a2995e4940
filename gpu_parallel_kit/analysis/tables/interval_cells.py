"""A step and a speedup with their 95 % intervals, as the compact view's cells and notes.

A comparison measured in rounds has an interval for each row's step and for its speedup
(`runs/scheduling/step_intervals.py`, over steps and rounds). A step's cell shows that interval
rather than one round's interquartile range, which says nothing of the drift between rounds; an
interval too wide to read (`runs/scheduling/step_intervals.too_wide`) is "too few steps to tell",
and the note under the table names the fix.
"""

from __future__ import annotations

import pandas as pd

from ...runs.scheduling.measuring_until_known import FIXED
from .cell_text import (
    LINE,
    NBSP,
    TOO_FEW_STEPS,
    TOO_FEW_STEPS_FIXED_NOTE,
    TOO_FEW_STEPS_NOTE,
    interval_text,
    missing,
    ms_text,
    ratio_text,
)

SPEEDUP_CI = ("speedup_ci_low", "speedup_ci_high")
STEP_CI = ("step_time_ci_low_s", "step_time_ci_high_s")


def step_text(row: pd.Series) -> str:
    """The step in ms. Measured in rounds: the median of the rounds' medians, and under it its
    95 % interval, "(4.51–4.98)", or "too few steps to tell". A run measured once: "4.72 ± 0.31",
    its median and interquartile range on one line (a spread needs no more than two digits)."""
    step = ms_text(row.get("step_time_s"))
    interval = interval_text(*(row.get(c) for c in STEP_CI), write=ms_text)
    if step and _rounds(row) > 1 and interval:
        return step + LINE + (interval if interval == TOO_FEW_STEPS else f"({interval})")
    spread = row.get("step_time_spread_s")
    if not step or missing(spread):
        return step
    return f"{step}{NBSP}±{NBSP}{float(spread) * 1000:.2g}"


def speedup_text(row: pd.Series) -> str:
    """ "1.62×", its 95 % interval under it, "(1.48–1.75)", and "within noise of 1" when the
    interval holds 1: a number never broken over two lines. "too few steps to tell" under it
    instead when the interval is too wide to read."""
    low, high = (row.get(c) for c in SPEEDUP_CI)
    text = ratio_text(row.get("speedup"))
    interval = interval_text(low, high)
    if not text or not interval:
        return text
    if interval == TOO_FEW_STEPS:
        return text + LINE + TOO_FEW_STEPS
    text += f"{LINE}({interval})"
    if float(low) <= 1.0 <= float(high):  # type: ignore[arg-type]
        text += LINE + f"within{NBSP}noise{NBSP}of{NBSP}1"
    return text


def step_notes(table: pd.DataFrame, steps: int | None) -> list[str]:
    """What the step cells rest on (`steps`: the timed steps every run has, if one number), and
    the fix where a step or a speedup had too few steps to tell."""
    notes = []
    if "rounds" in table.columns and bool((table["rounds"].fillna(1) > 1).any()):
        notes.append(
            "step (ms): the median of the rounds' median steps (warm-up left out), and under it "
            "its 95% interval over steps and rounds; a run measured once: its median ± the "
            "interquartile range of its steps."
        )
    elif steps:
        notes.append(
            f"step (ms): the median of {steps} timed steps per run (warm-up left out) ± their "
            "interquartile range."
        )
    unknown = _too_few_steps(table)
    if unknown and all(r.get("measured_until") == FIXED for r in unknown):
        notes.append(TOO_FEW_STEPS_FIXED_NOTE)
    elif unknown:
        notes.append(TOO_FEW_STEPS_NOTE + _needs_note(unknown))
    return notes


def too_few_steps_to_tell(table: pd.DataFrame) -> list[str]:
    """The runs ("data×2") whose step or speedup cell says "too few steps to tell", in table
    order: what a notebook names when its comparison could not tell them apart.

    >>> too_few_steps_to_tell(cmp.table)  # doctest: +SKIP
    ['single×1', 'data×4']
    """
    return [f"{r['strategy']}×{int(r['devices'])}" for r in _too_few_steps(table)]


def _too_few_steps(table: pd.DataFrame) -> list[pd.Series]:
    rows = [row for _, row in table.reset_index(drop=True).iterrows()]
    return [r for r in rows if TOO_FEW_STEPS in step_text(r) + speedup_text(r)]


def _needs_note(rows: list[pd.Series]) -> str:
    """How much longer the rows that could not tell would have needed, where they say."""
    needs = [float(r["measure_needs_s"]) for r in rows if not missing(r.get("measure_needs_s"))]
    if not needs:
        return ""
    return f" About {max(needs):.0f} s more of measuring per configuration would tell."


def _rounds(row: pd.Series) -> int:
    rounds = row.get("rounds")
    return 1 if missing(rounds) else int(rounds)
