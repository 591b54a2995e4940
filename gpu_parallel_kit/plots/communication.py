"""Communication plots: where each run's step goes, and the communication share by device count.

Measured rows are solid; projected rows (a cost model's, `cmp.project(...)`) are dashed or pale and
titled as projected. The caption states how communication was measured, and, on virtual devices,
that the figure is runtime overhead on shared cores rather than a network's cost.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes

from ..analysis.breakdown import step_breakdown
from .style import DisplayFigure, projected_rows, run_labels, title

PARTS = (("compute", "#4c72b0"), ("exposed communication", "#dd8452"), ("idle (bubble)", "#bbbbbb"))
METHOD = (
    "Data parallel: exposed communication = median step with minus without the all-reduce, "
    "alternated in blocks in the same worker (the 1-device run is the no-op control). Model "
    "parallel: copies across the cuts; idle = measured bubble."
)


def communication_figure(df: pd.DataFrame) -> DisplayFigure:
    """Stacked compute, exposed communication and idle per run; communication share by devices."""
    rows = df[df["status"] == "ok"]
    figure = DisplayFigure(figsize=(14, 5.2), layout="constrained")
    bars, share = figure.subplots(1, 2, width_ratios=[3, 2])
    _draw_breakdown(bars, rows)
    _draw_share(share, rows)
    caption = METHOD
    if "virtual" in rows.columns and rows["virtual"].astype(bool).any():
        caption += (
            " On virtual devices these are runtime overheads on shared cores, not a network's cost."
        )
    figure.supxlabel(caption, fontsize=8, wrap=True)
    return figure


def _draw_breakdown(ax: Axes, rows: pd.DataFrame) -> None:
    parts = [step_breakdown(row) for _, row in rows.iterrows()]
    labels = run_labels(rows)
    positions = range(len(rows))
    bottom = [0.0] * len(rows)
    projected = list(projected_rows(rows))
    for index, (name, colour) in enumerate(PARTS):
        heights = [0.0 if pd.isna(p[index]) else p[index] * 1000 for p in parts]
        ax.bar(
            positions,
            heights,
            bottom=bottom,
            color=colour,
            label=name,
            alpha=None,
            edgecolor=["black" if p else colour for p in projected],
            hatch=None,
            linewidth=0.6,
        )
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    for position, is_projected in zip(positions, projected, strict=True):
        if is_projected:
            ax.bar(
                position, bottom[position], fill=False, hatch="..", edgecolor="white", linewidth=0
            )
    ax.set_xticks(list(positions), labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("ms per step")
    ax.legend(fontsize=8)
    ax.set_title(title("Where a step goes", rows), fontsize=10)


def _draw_share(ax: Axes, rows: pd.DataFrame) -> None:
    with_share = rows[rows["comm_share"].notna() & (rows["strategy"] != "single")]
    for (strategy, projected), group in with_share.groupby(
        [with_share["strategy"], projected_rows(with_share)], sort=False
    ):
        group = group.sort_values("devices")
        ax.plot(
            group["devices"],
            group["comm_share"].clip(lower=0) * 100,
            linestyle="--" if projected else "-",
            marker="o",
            markerfacecolor="none" if projected else None,
            label=f"{strategy}{', projected' if projected else ''}",
        )
    if with_share.empty:
        ax.text(
            0.5, 0.5, "no communication measured", ha="center", va="center", transform=ax.transAxes
        )
    else:
        ax.set_xticks(sorted(set(with_share["devices"])))
        ax.legend(fontsize=8)
    ax.set_xlabel("devices")
    ax.set_ylabel("communication share of the step (%)")
    ax.set_title(title("Communication share", rows), fontsize=10)
