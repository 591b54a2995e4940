"""Table cells as text: figures to four significant digits, bytes in MiB, and words where a
figure would mislead ("not reached", "below noise (±x ms)").

Shared by the markdown and terminal tables (analysis/tables.py) and the compact views
(analysis/compact.py), so every front end writes a figure the same way.
"""

from __future__ import annotations

import math

import pandas as pd

from ..runs.noise import noise_text

_BYTE_COLUMNS = {
    "peak_memory_bytes": "peak_memory_mib",
    "comm_bytes": "comm_mib",
    "state_bytes": "state_mib",
}
_MIB = 2**20
NOT_REACHED = "not reached"
NOT_MEASURED = "not measured"


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
