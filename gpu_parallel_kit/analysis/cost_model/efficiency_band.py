"""A projected row's band in the figures' units: throughput, speedup and communication share at
the efficiency band's high and low ends.

A counted projection (`analysis/cost_model/projected_compute.py`) carries its step at the band's
high efficiency (`step_time_low_s`, the fastest step) and at its low one (`step_time_high_s`, the
slowest). The plots draw the band between them. A speedup is taken against the projected
single device *at the same efficiency*, so its two ends are the speedups the fastest and the
slowest GPUs would see; faster compute makes the same communication weigh more, so the fastest
step often gives the smallest speedup. Measured rows, and projections without a band, get NaN.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .speedup_baseline import Candidate, baseline_index

BAND = ("throughput", "speedup", "comm_share")


def band(df: pd.DataFrame) -> pd.DataFrame:
    """Columns `<figure>_low` and `<figure>_high` for each figure in `BAND`, per row of `df`
    (a comparison table); NaN where a row has no band."""
    columns = [f"{figure}_{end}" for figure in BAND for end in ("low", "high")]
    out = pd.DataFrame(np.nan, index=df.index, columns=columns)
    if "step_time_low_s" not in df.columns or df.empty:
        return out
    batch = pd.to_numeric(df["global_batch"], errors="coerce")
    fast = batch / pd.to_numeric(df["step_time_low_s"], errors="coerce")  # samples/s
    slow = batch / pd.to_numeric(df["step_time_high_s"], errors="coerce")
    ok = df["status"] == "ok"
    fast, slow = fast.where(ok), slow.where(ok)
    out["throughput_low"], out["throughput_high"] = slow, fast
    comm = pd.to_numeric(df["comm_time_s"], errors="coerce").clip(lower=0)
    out["comm_share_low"] = comm / df["step_time_high_s"]
    out["comm_share_high"] = comm / df["step_time_low_s"]
    groups = [df["experiment_id"], df["backend"] if "backend" in df.columns else df["scaling"]]
    for _, group in df.groupby(groups, sort=False, dropna=False):
        position = baseline_index(
            Candidate(r.status, r.strategy, r.devices, r.throughput_samples_s)
            for r in group.itertuples(index=False)
        )
        if position is None:
            continue
        base = group.index[position]
        at_fast = fast[group.index] / fast[base]
        at_slow = slow[group.index] / slow[base]
        out.loc[group.index, "speedup_low"] = np.fmin(at_fast, at_slow)
        out.loc[group.index, "speedup_high"] = np.fmax(at_fast, at_slow)
    # fmin/fmax keep a lone number; a band needs both ends.
    missing = fast.isna() | slow.isna()
    out.loc[missing, :] = np.nan
    return out


def has_band(df: pd.DataFrame) -> pd.Series:
    """Which rows have a band to draw."""
    found = band(df)
    return found["throughput_low"].notna() & found["throughput_high"].notna()
