"""Table cells as text: figures to four significant digits, bytes in MiB, and words where a
figure would mislead ("not reached", "below noise (±x ms)").

Shared by the markdown and terminal tables (analysis/tables/comparison_table.py) and the compact
views (analysis/tables/compact_view.py), so every front end writes a figure the same way. The
`*_text` functions write a figure for people rather than for a report's columns: a step in ms to
three significant digits (a step measured on shared cores is not known better), bytes in the unit
that keeps them short, shares in %, a ratio with its interval, and a difference at float32's
rounding named as such; a figure that does not apply is "", never NaN or <NA>. An interval too wide
to read (`runs/scheduling/step_intervals.too_wide`) is written "too few steps to tell", never as its
two ends.
"""

from __future__ import annotations

import math

import pandas as pd

from ...runs.results.below_noise import noise_text
from ...runs.scheduling.step_intervals import too_wide

_BYTE_COLUMNS = {
    "peak_memory_bytes": "peak_memory_mib",
    "comm_bytes": "comm_mib",
    "state_bytes": "state_mib",
}
_MIB = 2**20
LINE = "\n"  # a line break inside a cell: <br> in HTML
NBSP = "\u00a0"  # keeps a figure and its unit or sign on one line
NOT_REACHED = "not reached"
NOT_MEASURED = "not measured"
TOO_FEW_STEPS = "too few steps to tell"
# Under a view that wrote TOO_FEW_STEPS: what it means and the fix.
TOO_FEW_STEPS_NOTE = (
    f"{TOO_FEW_STEPS}: the 95% interval's high end is more than twice its low end, so the figure "
    "could be half or double what it is; a comparison measures more rounds until each step is "
    "known or its budget is spent: give it a larger one (measure_s=), or more steps "
    "(steps_per_epoch, epochs)."
)
# The same, where the caller fixed the rounds, so none were added.
TOO_FEW_STEPS_FIXED_NOTE = (
    f"{TOO_FEW_STEPS}: the 95% interval's high end is more than twice its low end, so the figure "
    "could be half or double what it is; this comparison's rounds were fixed (rounds= or "
    "GPK_ROUNDS), so it measured no more: give it more rounds, or leave rounds unset to measure "
    "until each step is known, or more steps (steps_per_epoch, epochs)."
)


def display_frame(df: pd.DataFrame) -> pd.DataFrame:
    """`df` as text cells, byte columns converted to MiB and renamed to say so."""
    cells: dict[str, list[str]] = {}
    for column in df.columns:
        values = df[column]
        if column in _BYTE_COLUMNS:
            cells[_BYTE_COLUMNS[column]] = [figure_text(v / _MIB) for v in values]
        elif pd.api.types.is_bool_dtype(values):
            cells[column] = ["" if missing(v) else "yes" if v else "no" for v in values]
        elif pd.api.types.is_float_dtype(values):
            cells[column] = [figure_text(v) for v in values]
        else:
            cells[column] = ["" if missing(v) else str(v) for v in values]
    return pd.DataFrame(cells, columns=list(cells), dtype=object)


def mark_not_reached(shown: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Put "not reached" where a finished run's time to target would be."""
    if "time_to_target_s" in shown.columns and "target_reached" in df.columns:
        missed = (df["target_reached"] == False).fillna(False).to_numpy(dtype=bool)  # noqa: E712
        shown.loc[missed, "time_to_target_s"] = NOT_REACHED
    return shown


def mark_below_noise(shown: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Put "below noise (±x ms)" where a communication figure under its noise would be."""
    if "comm_below_noise" not in df.columns:
        return shown
    below = df["comm_below_noise"].fillna(False).to_numpy(dtype=bool)
    if not below.any():
        return shown
    noise = df["comm_noise_s"] if "comm_noise_s" in df.columns else pd.Series(math.nan, df.index)
    texts = [noise_text(float(n)) for n in noise]
    for column in ("comm_time_s", "comm_share"):
        if column in shown.columns:
            shown[column] = shown[column].astype(object)
            shown.loc[below, column] = [t for t, b in zip(texts, below, strict=True) if b]
    return shown


def mark_not_measured(shown: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Put "not measured" where a run that skipped the measurement (measure_comm=False) would
    show its communication: blank could be read as zero."""
    if "comm_measured" not in df.columns:
        return shown
    skipped = ~df["comm_measured"].fillna(True).to_numpy(dtype=bool)
    finished = (df["status"] == "ok").to_numpy(dtype=bool) if "status" in df.columns else True
    skipped &= finished
    for column in ("comm_time_s", "comm_share"):
        if column in shown.columns and skipped.any():
            shown[column] = shown[column].astype(object)
            shown.loc[skipped, column] = NOT_MEASURED
    return shown


def figure_text(value: float) -> str:
    """4 significant digits, but whole numbers from 10 000 up, so throughput never shows 1.2e+04."""
    if missing(value):
        return ""
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
# float32 keeps 24 bits: weights of order 1 that differ by less than this differ by rounding.
FLOAT32_ROUNDING = 1e-5


def three_digits(value: float) -> str:
    """Three significant digits; whole numbers, with thousands separators, from 1 000 up."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    text = f"{value:.3g}"
    return text if "e" not in text else f"{value:.2e}"


def parse_number(value: object) -> float:
    """A row's value as a float: NaN where it is missing or not a number."""
    try:
        return math.nan if value is None else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def format_number(value: object) -> str:
    """A plain figure for people: "yes"/"no" for a flag, whole numbers as they are (with
    thousands separators from 10,000: "150,994,944"), else three significant digits; "" where it
    is missing."""
    if missing(value):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    number = float(value)  # type: ignore[arg-type]
    if isinstance(value, int) or (number.is_integer() and abs(number) < 1e15):
        whole = int(value) if isinstance(value, int) else int(number)
        return f"{whole:,}" if abs(whole) >= 10_000 else str(whole)
    return three_digits(number)


def ms_text(seconds: object) -> str:
    """A time in seconds as milliseconds, three significant digits: 0.004723 -> "4.72"."""
    return "" if missing(seconds) else three_digits(float(seconds) * 1000)


def bytes_text(nbytes: object) -> str:
    """Bytes in the unit that keeps them to three digits: 1301124 -> "1.24 MiB", 0 -> "0 B"."""
    if missing(nbytes):
        return ""
    value, unit = float(nbytes), 0
    while abs(value) >= 1024 and unit < len(_BYTE_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    number = f"{value:.0f}" if unit == 0 else three_digits(value)
    return f"{number} {_BYTE_UNITS[unit]}"


def share_text(share: object) -> str:
    """A share as a percentage: 0.428571 -> "43%", 0.002215 -> "0.2%"; one decimal below 10 %
    so a small share does not read as none."""
    if missing(share):
        return ""
    percent = float(share) * 100
    if percent == 0 or abs(percent) >= 10:
        return f"{percent:.0f}%"
    return f"{percent:.1f}%" if abs(percent) >= 0.1 else f"{percent:.1g}%"


def count_text(value: object) -> str:
    """A rate such as samples/s to three significant digits: 169103 -> "169k"."""
    if missing(value):
        return ""
    number = float(value)
    for above, scale, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if abs(number) >= above:
            return f"{number / scale:.3g}{suffix}"
    return f"{number:,.0f}" if abs(number) >= 100 else f"{number:.3g}"


def ratio_text(ratio: object, low: object = None, high: object = None) -> str:
    """A speedup: "1.62×", or "1.62× (1.48–1.75)" with its interval when both ends are known,
    "1.66× (too few steps to tell)" when the interval is too wide to read."""
    if missing(ratio):
        return ""
    text = f"{float(ratio):.3g}×"
    interval = interval_text(low, high)
    return f"{text} ({interval})" if interval else text


def interval_text(low: object, high: object, write=lambda v: f"{float(v):.3g}") -> str:
    """ "1.48–1.75", each end written by `write`; `TOO_FEW_STEPS` where the interval is too
    wide to read (`runs/scheduling/step_intervals.too_wide`); "" without both ends."""
    if not (_known(low) and _known(high)):
        return ""
    return TOO_FEW_STEPS if too_wide(low, high) else f"{write(low)}–{write(high)}"


def difference_text(difference: float) -> str:
    """How far apart two sets of weights are: "6e-8 (float32 rounding)" below what float32 can
    tell apart, "0 (identical)", else three significant digits."""
    if difference == 0:
        return "0 (identical)"
    if abs(difference) < FLOAT32_ROUNDING:
        mantissa, exponent = f"{difference:.0e}".split("e")
        return f"{mantissa}e{int(exponent)} (float32 rounding)"
    return f"{difference:.3g}"


def _known(value: object) -> bool:
    if missing(value):
        return False
    try:
        return not math.isnan(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
