"""Predicted against measured: each row's calibrated prediction beside its measured step.

One point per measured row that carries a prediction (`predicted_step_time_s`), coloured by
strategy, on log axes with the line where prediction equals measurement and the band within
0.7-1.4 shaded, so a row the cost model gets wrong stands out.
"""

from __future__ import annotations

import math

import pandas as pd

from ..errors import GpkError
from .style import DisplayFigure, plain_log_ticks, strategy_color

BAND = (0.7, 1.4)


def prediction_figure(df: pd.DataFrame) -> DisplayFigure:
    """The rows of a comparison's table with a prediction, predicted against measured (ms)."""
    rows = df[df["predicted_step_time_s"].notna() & df["step_time_s"].notna() & ~df["projected"]]
    if rows.empty:
        raise GpkError(
            "no row carries a prediction; compare with calibration=gpk.calibrate(...) first"
        )
    figure = DisplayFigure(figsize=(6.5, 5), layout="constrained")
    ax = figure.subplots()
    for strategy, group in rows.groupby("strategy", sort=False):
        ax.scatter(
            1e3 * group["step_time_s"],
            1e3 * group["predicted_step_time_s"],
            color=strategy_color(str(strategy)),
            label=str(strategy),
        )
        for _, row in group.iterrows():
            ax.annotate(
                f"×{int(row['devices'])}",
                (1e3 * row["step_time_s"], 1e3 * row["predicted_step_time_s"]),
                textcoords="offset points",
                xytext=(4, 2),
                fontsize=7,
            )
    values = [*(1e3 * rows["step_time_s"]), *(1e3 * rows["predicted_step_time_s"])]
    low, high = min(values) / 1.5, max(values) * 1.5
    ax.plot([low, high], [low, high], color="0.3", lw=1, label="predicted = measured")
    ax.fill_between(
        [low, high],
        [BAND[0] * low, BAND[0] * high],
        [BAND[1] * low, BAND[1] * high],
        color="0.92",
        zorder=0,  # under the points: a point inside the band stays visible
        label=f"within {BAND[0]}-{BAND[1]}",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    plain_log_ticks(ax)
    ax.set_xlabel("measured step (ms)")
    ax.set_ylabel("predicted step (ms)")
    ratios = rows["predicted_step_time_s"] / rows["step_time_s"]
    median = float(ratios.median()) if len(ratios) else math.nan
    source = str(rows["predicted_from"].iloc[0]).split(";")[0]
    ax.set_title(f"Predicted ÷ measured: median {median:.2f}\n{source}", fontsize=10)
    ax.legend(fontsize=8)
    return figure
