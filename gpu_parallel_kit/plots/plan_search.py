"""A plan search's figure: step time against memory per GPU for every plan, fitting or not, the
GPU's usable memory as a line and the best plan marked."""

from __future__ import annotations

import pandas as pd

from .style import DisplayFigure, plain_log_ticks

FIT_COLOUR, MISS_COLOUR, BEST_COLOUR = "tab:blue", "0.7", "tab:red"


def plans_figure(table: pd.DataFrame, room: float, title: str) -> DisplayFigure:
    """The figure of `table` (`Plans.table`): one point per plan; `room` is the usable bytes."""
    figure = DisplayFigure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    fits = table["fits"].astype(bool)
    for mask, colour, label, marker in (
        (~fits, MISS_COLOUR, "does not fit", "x"),
        (fits, FIT_COLOUR, "fits", "o"),
    ):
        part = table[mask]
        if len(part):
            axes.scatter(
                part["memory_bytes"] / 1e9,
                part["step_time_s"],
                s=12,
                c=colour,
                marker=marker,
                alpha=0.6,
                label=f"{label} ({len(part)})",
            )
    axes.axvline(room / 1e9, color="0.3", linestyle="--", linewidth=1, label="usable memory")
    if fits.any():
        best = table[fits].iloc[0]
        axes.scatter(
            [best["memory_bytes"] / 1e9],
            [best["step_time_s"]],
            s=160,
            marker="*",
            c=BEST_COLOUR,
            zorder=3,
            label=f"best: {best['step_time_s']:.3g} s",
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    plain_log_ticks(axes, minors=("y",))  # the memory axis spans decades: majors only
    axes.set_xlabel("memory per GPU (GB)")
    axes.set_ylabel("step time (s)")
    axes.set_title(title, fontsize=10, wrap=True)
    axes.legend(loc="best", fontsize=8)
    return figure
