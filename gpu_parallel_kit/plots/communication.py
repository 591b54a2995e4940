"""Communication plots: where each run's step goes, and the communication share by device count.

Measured rows are solid; projected rows (a cost model's, `cmp.project(...)`) are dashed or pale and
titled as projected. The caption states how communication was measured, and, on virtual devices,
that the figure is runtime overhead on shared cores rather than a network's cost.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes

from ..analysis.cost_model.efficiency_band import band
from ..analysis.tables.cell_text import bytes_text
from ..analysis.tables.row_flags import flagged
from ..analysis.tables.step_breakdown import step_breakdown
from ..runs.results.below_noise import noise_text
from ..strategies.expert import DENSE, DISPATCHED
from .style import (
    DisplayFigure,
    mesh_tag,
    projected_rows,
    run_labels,
    series_names,
    strategy_color,
    title,
)

PARTS = (("compute", "#4c72b0"), ("exposed communication", "#dd8452"), ("idle (bubble)", "#bbbbbb"))


def communication_figure(df: pd.DataFrame) -> DisplayFigure:
    """Stacked compute, exposed communication and idle per run; communication share by devices."""
    rows = df[df["status"] == "ok"]
    figure = DisplayFigure(figsize=(11, 4.8), layout="constrained")
    bars, share = figure.subplots(1, 2, width_ratios=[3, 2])
    _draw_breakdown(bars, rows)
    _draw_share(share, rows)
    figure.supxlabel(method_caption(rows), fontsize=9.5, wrap=True)
    return figure


def method_caption(rows: pd.DataFrame) -> str:
    """How the communication of the runs drawn was measured, one sentence per kind of run the
    figure holds (a strategy's record says which), and none for a kind it does not hold."""
    names = pd.Series(series_names(rows), index=rows.index, dtype=object)
    kinds = _kinds(rows)
    flag = {f: flagged(rows, f) for f in _FLAGS}
    exposed = flag["all_reduce"] & ~flag["layout"] & ~flag["stages"]
    layout = flag["layout"] & (kinds == "")
    sentences = []
    if exposed.any():
        one_device = (rows["devices"][exposed] <= 1).any()
        control = " (the 1-device run is the no-op control)" if one_device else ""
        sentences.append(
            f"{_named(names[exposed])}: exposed communication = median step with minus without "
            f"the all-reduce, alternated in blocks in the same worker{control}."
        )
    if flag["stages"].any():
        sentences.append(
            f"{_named(names[flag['stages']])}: copies across the cuts; idle = measured bubble."
        )
    if layout.any():
        sentences.append(
            f"{_named(names[layout])}: the layout's collectives timed alone on arrays of the sizes "
            "they move."
        )
    experts = kinds.isin(list(_EXPERT_COLLECTIVES))
    for kind, what in _EXPERT_COLLECTIVES.items():
        if (kinds == kind).any():
            sentences.append(f"{_named(names[kinds == kind])}: {what}.")
    if experts.any():
        meshes = rows["mesh"][experts] if "mesh" in rows.columns else pd.Series(dtype=object)
        data_axis = meshes.map(mesh_tag).any()
        gradients = ", with the gradients' all-reduce over the data axis" if data_axis else ""
        sentences.append(
            f"These collectives are timed alone on arrays of the sizes they move{gradients}."
        )
    if rows.get("comm_below_noise", pd.Series(dtype=object)).fillna(False).astype(bool).any():
        sentences.append('"Below noise" where a figure is smaller than its scatter between blocks.')
    if "virtual" in rows.columns and rows["virtual"].astype(bool).any():
        sentences.append(
            "On virtual devices these are runtime overheads on shared cores, not a network's cost."
        )
    return " ".join(sentences)


_FLAGS = ("all_reduce", "layout", "stages")
# What each way of computing experts moves, as its run measures it (worker/jax/experts.py).
_EXPERT_COLLECTIVES = {
    DENSE: (
        "the all-reduces of each expert bank's weighted outputs (forward) and of their input's "
        "gradient (backward) over the expert axis"
    ),
    DISPATCHED: (
        "the all-to-alls that send each block's tokens to their experts' devices and back, "
        "forward and backward"
    ),
}


def _named(names: pd.Series) -> str:
    """The series a sentence is about, each once, as the legend and the labels name them."""
    return ", ".join(dict.fromkeys(names))


def _draw_breakdown(ax: Axes, rows: pd.DataFrame) -> None:
    parts = [step_breakdown(row) for _, row in rows.iterrows()]
    labels = run_labels(rows)
    positions = range(len(rows))
    bottom = [0.0] * len(rows)
    projected = list(projected_rows(rows))
    for index, (name, colour) in enumerate(PARTS):
        heights = [0.0 if pd.isna(p[index]) else p[index] * 1000 for p in parts]
        shown = index == 0 or any(heights)  # the legend names only the parts a bar holds
        ax.bar(
            positions,
            heights,
            bottom=bottom,
            color=colour,
            label=name if shown else "_" + name,
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
    _draw_whiskers(ax, rows, bottom)
    for position, (_, row) in zip(positions, rows.iterrows(), strict=True):
        if bool(row.get("comm_below_noise", False)):
            ax.annotate(
                "comm:\nbelow noise",
                (position, bottom[position]),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7.5,
                color="#8a4b1f",
            )
    tops = [*bottom, *(rows.get("step_time_high_s", pd.Series(dtype=float)).dropna() * 1000)]
    if tops:
        ax.set_ylim(0, max(tops) * 1.25 or 1.0)  # room for the notes above the bars
    ax.set_xticks(list(positions), labels, rotation=35, ha="right", fontsize=9)
    ax.set_ylabel("ms per step")
    ax.legend(fontsize=8.5, loc="upper left")
    ax.set_title(title("Where a step goes", rows, "dotted bars"), fontsize=10)


def _draw_whiskers(ax: Axes, rows: pd.DataFrame, totals: list[float]) -> None:
    """A projected step's efficiency band, from the fastest to the slowest GPU step (ms), as a
    whisker over its stacked bar (the likely step)."""
    if "step_time_low_s" not in rows.columns:
        return
    low, high = (
        rows["step_time_low_s"].to_numpy() * 1000,
        rows["step_time_high_s"].to_numpy() * 1000,
    )
    drawn = ~(pd.isna(low) | pd.isna(high))
    if not drawn.any():
        return
    at = [t for t, d in zip(totals, drawn, strict=True) if d]
    ax.errorbar(
        [p for p, d in zip(range(len(rows)), drawn, strict=True) if d],
        at,
        yerr=[(at - low[drawn]).clip(min=0), (high[drawn] - at).clip(min=0)],
        fmt="none",
        ecolor="0.2",
        elinewidth=1.0,
        capsize=3,
        label="efficiency band",
    )


def _draw_share(ax: Axes, rows: pd.DataFrame) -> None:
    """The share where it was measured above its noise; where it was not, a hollow mark at 0 in
    the series' colour, named in the legend and labelled with the bytes moved and the noise
    (runs/results/below_noise.py): never a negative share. Dispatched experts are squares on a
    dotted line beside keras-hub's dense bank, in the strategy's colour."""
    multi = rows[~flagged(rows, "baseline")]
    with_share = multi[multi["comm_share"].notna()]
    below = (
        multi[multi["comm_below_noise"].fillna(False).astype(bool)]
        if "comm_below_noise" in multi.columns
        else multi.iloc[0:0]
    )
    bands = band(with_share)
    names = pd.Series(series_names(with_share), index=with_share.index, dtype=object)
    for (name, projected), group in with_share.groupby(
        [names, projected_rows(with_share)], sort=False
    ):
        strategy = group["strategy"].iloc[0]
        group = group.sort_values("devices")
        found = bands.loc[group.index]
        if projected and found["comm_share_low"].notna().any():
            ax.fill_between(
                group["devices"],
                found["comm_share_low"] * 100,
                found["comm_share_high"] * 100,
                color=strategy_color(strategy),
                alpha=0.15,
                linewidth=0,
                label=f"{strategy}, efficiency band",
            )
        dispatched = (_kinds(group) == DISPATCHED).any()
        ax.plot(
            group["devices"],
            group["comm_share"].clip(lower=0) * 100,
            linestyle="--" if projected else (":" if dispatched else "-"),
            color=strategy_color(strategy),  # as in every other figure
            marker="s" if dispatched else "o",
            markerfacecolor="none" if projected else None,
            label=f"{name}{', projected' if projected else ''}",
        )
    below_names = pd.Series(series_names(below), index=below.index, dtype=object)
    series = list(dict.fromkeys(below_names))
    for name, group in below.groupby(below_names, sort=False):
        beside = 10 * (series.index(name) - (len(series) - 1) / 2)  # points: labels side by side
        # hollow at 0, in the series' colour and named: the run moved bytes, but its figure
        # fell within its own scatter
        ax.plot(
            group["devices"],
            [0.0] * len(group),
            linestyle="none",
            marker="s" if (_kinds(group) == DISPATCHED).any() else "o",
            markersize=8,
            markerfacecolor="none",
            color=strategy_color(group["strategy"].iloc[0]),
            label=f"{name}: below noise",
        )
        for _, row in group.iterrows():
            moved = bytes_text(row.get("comm_bytes"))
            ax.annotate(
                f"{name}{f', {moved}' if moved else ''}: {noise_text(row.get('comm_noise_s'))}",
                (row["devices"], 0.0),
                xytext=(beside, 10),
                textcoords="offset points",
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=8,
                color="#555555",
            )
    shown = pd.concat([with_share, below])
    if shown.empty:
        ax.text(
            0.5, 0.5, "no communication measured", ha="center", va="center", transform=ax.transAxes
        )
    else:
        ax.set_xticks(sorted(set(shown["devices"])))
        ax.legend(fontsize=8.5, loc="upper left")
    shares = pd.concat([with_share["comm_share"], bands["comm_share_high"]])
    top = float(shares.clip(lower=0).max() * 100) if len(with_share) else 0.0
    ax.set_ylim(0, max(top * 1.3, 10.0))  # a share is 0-100 %; 10 % at least, so noise reads
    ax.set_xlabel("devices")
    ax.set_ylabel("communication share of the step (%)")
    ax.set_title(title("Communication share", rows), fontsize=10)


def _kinds(rows: pd.DataFrame) -> pd.Series:
    """Each row's expert kind (dense or dispatched), "" where it has none."""
    if "experts" not in rows.columns:
        return pd.Series("", index=rows.index, dtype=object)
    return rows["experts"].fillna("")
