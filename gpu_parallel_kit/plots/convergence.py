"""Convergence figures: the curves against training time and against epochs, and time to target.

The lesson they carry: a run that processes more samples per second is only faster if it also
needs no more samples to learn. So the curves are drawn twice, against training time (what the
user waits for) and against epochs (how much data each run needed), and the time-to-target panel
sets the speedup in time to target beside the speedup in samples per second.

Like `plots/comparison.py`, object-API figures (`DisplayFigure`) that show inline without pyplot.
Built from plain `RunResult`s and the comparison table; no TensorFlow. Projected rows are left out:
a cost model predicts step times, not learning curves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
from matplotlib.axes import Axes

from ..analysis.tables.comparison_table import comparison_table
from ..analysis.tables.time_to_accuracy import (
    metric_series,
    reach_of,
    recorded_metrics,
    rows_with_target,
)
from ..runs.description.accuracy_target import Target
from ..runs.results.run_result import RunResult
from ..strategies import has
from .style import DisplayFigure, draw_missing_bars, strategy_color, title

PANEL_SIZE = (5.5, 3.6)  # two side by side: 11 inches, the width a notebook shows at 100 dpi
_RUN_STYLES = ("-", "--", "-.", ":")
# Distinct colours for runs that share a strategy: matplotlib's tab10 without its grey (single's).
_RUN_COLOURS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
)


def convergence_figure(
    results: Sequence[RunResult], metrics: str | Sequence[str] | None = None
) -> DisplayFigure:
    """One row per metric: its value against training time (left) and against epochs (right),
    one line per run; the target as a dashed line, the point each run met it as a star."""
    runs = [r for r in results if r.ok and not r.projected]
    names = _chosen_metrics(runs, metrics)
    figure = DisplayFigure(
        figsize=(PANEL_SIZE[0] * 2, PANEL_SIZE[1] * len(names)), layout="constrained"
    )
    axes = figure.subplots(len(names), 2, squeeze=False)
    table = comparison_table(runs)
    labels = _line_labels(runs)
    for row, metric in enumerate(names):
        for column, (axis, heading) in enumerate(
            (("time_s", "training time"), ("epoch", "epochs"))
        ):
            ax = axes[row][column]
            _draw_curves(ax, runs, labels, metric, axis)
            ax.set_title(title(f"{metric} against {heading}", table), fontsize=10)
            ax.set_xlabel(
                "training time (s; compilation and evaluations excluded)"
                if axis == "time_s"
                else "epoch"
            )
            ax.set_ylabel(metric)
    _one_legend(figure)
    return figure


def _one_legend(figure: DisplayFigure) -> None:
    """Every panel draws the same runs: one legend under them all, covering no curve."""
    entries: dict[str, object] = {}
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if entries:
        figure.legend(
            list(entries.values()),
            list(entries),
            loc="outside lower center",
            ncols=min(3, len(entries)),
            fontsize=8,
            frameon=False,
        )


def time_to_target_figure(df: pd.DataFrame) -> DisplayFigure:
    """Left: each run's time to target, "not reached" as an empty hatched bar. Right: speedup
    in samples per second beside speedup in time to target, both against the same baseline."""
    rows = df[~df["projected"].astype(bool)] if "projected" in df.columns else df
    rows = rows_with_target(rows)
    figure = DisplayFigure(figsize=(11.0, 4.6), layout="constrained")
    left, right = figure.subplots(1, 2)
    if rows.empty:
        for ax in (left, right):
            ax.text(
                0.5,
                0.5,
                "no target: pass target={'val_accuracy': 0.9} to compare()",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
        return figure
    target = str(rows["target"].iloc[0])
    _draw_time_bars(left, rows, target)
    _draw_speedups(right, rows, target)
    return figure


def _chosen_metrics(runs: Sequence[RunResult], metrics: str | Sequence[str] | None) -> list[str]:
    if isinstance(metrics, str):
        return [metrics]
    if metrics:
        return list(metrics)
    for run in runs:
        target = Target.from_dict(run.target)
        if target is not None:
            return [target.metric]
    recorded = {name for run in runs for name in recorded_metrics(run)}
    return ["val_loss" if "val_loss" in recorded else "loss"]


def _line_labels(runs: Sequence[RunResult]) -> list[str]:
    """What tells the lines apart, and nothing more: "data×4, weak, lr ×4 (warmup 1 ep)"."""
    several_scalings = len({r.scaling for r in runs}) > 1
    several_modes = len({r.mode for r in runs}) > 1
    labels = []
    for run in runs:
        label = f"{run.strategy}×{run.devices}"
        if several_scalings:
            label += f", {run.scaling}"
        if several_modes:
            label += f", {run.mode}"
        label += f", batch {run.global_batch}"
        if run.lr_factor != 1:
            label += f", lr ×{run.lr_factor:.3g}"
            if run.warmup_epochs:
                label += f" (warmup {run.warmup_epochs:g} ep)"
        labels.append(label)
    return labels


def line_colours(runs: Sequence[RunResult]) -> list[str]:
    """One colour per line. The strategy's colour while each strategy has one run; once a strategy
    has several (weak scaling with and without a learning-rate rule), every run gets a colour of
    its own, so that no two lines are told apart by their dashes alone. `single` stays grey."""
    strategies = [run.strategy for run in runs]
    if len(set(strategies)) == len(strategies):
        return [strategy_color(s) for s in strategies]
    free = iter(_RUN_COLOURS * (len(runs) // len(_RUN_COLOURS) + 1))
    return [strategy_color(s) if has(s, "baseline") else next(free) for s in strategies]


def _bar_labels(rows: pd.DataFrame) -> list[str]:
    """Enough to tell apart runs of one strategy and device count: "data×4, batch 128, lr ×4"."""
    several_batches = rows["global_batch"].nunique() > 1
    labels = []
    for _, row in rows.iterrows():
        label = f"{row['strategy']}×{row['devices']}"
        if several_batches:
            label += f", batch {row['global_batch']}"
        if pd.notna(row["lr_factor"]) and row["lr_factor"] != 1:
            label += f", lr ×{row['lr_factor']:.3g}"
        labels.append(label)
    return labels


def _draw_curves(
    ax: Axes, runs: Sequence[RunResult], labels: Sequence[str], metric: str, axis: str
) -> None:
    drawn = False
    target = None
    counts: dict[str, int] = {}
    for run, label, color in zip(runs, labels, line_colours(runs), strict=True):
        points = metric_series(run, metric)
        if not points:
            continue
        drawn = True
        index = counts[run.strategy] = counts.get(run.strategy, -1) + 1
        xs = [getattr(p, axis) for p in points]
        ax.plot(
            xs,
            [p.value for p in points],
            marker="o" if len(points) <= 30 else None,
            markersize=3,
            linestyle=_RUN_STYLES[index % len(_RUN_STYLES)],
            color=color,
            label=label,
        )
        own = Target.from_dict(run.target)
        if own is not None and own.metric == metric:
            target = own
            reach = reach_of(run)
            if reach is not None and reach.reached:
                ax.plot(
                    reach.time_s if axis == "time_s" else reach.epoch,
                    next(p.value for p in points if own.met_by(p.value)),
                    marker="*",
                    markersize=12,
                    color=color,
                    markeredgecolor="black",
                    linestyle="none",
                )
    if target is not None:
        ax.axhline(target.value, linestyle="--", color="0.4", linewidth=1, label=f"target {target}")
    if not drawn:
        hint = " (validation metrics need validation=...)" if metric.startswith("val_") else ""
        ax.text(
            0.5,
            0.5,
            f"no run recorded {metric}{hint}",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        return


def _draw_time_bars(ax: Axes, rows: pd.DataFrame, target: str) -> None:
    values = rows["time_to_target_s"].to_numpy(dtype=float)
    reached = ~pd.isna(values) & (rows["status"] == "ok").to_numpy()
    positions = list(range(len(rows)))
    colors = [strategy_color(s) for s in rows["strategy"]]
    bars = ax.bar(
        [p for p, ok in zip(positions, reached, strict=True) if ok],
        values[reached],
        color=[c for c, ok in zip(colors, reached, strict=True) if ok],
    )
    epochs = rows["epochs_to_target"].to_numpy(dtype=float)[reached]
    ax.bar_label(
        bars,
        labels=[f"{v:.3g} s\nepoch {e:.3g}" for v, e in zip(values[reached], epochs, strict=True)],
        fontsize=8,
        padding=2,
    )
    draw_missing_bars(ax, positions, rows["status"], reached, values, "not reached")
    ax.set_xticks(positions, _bar_labels(rows), rotation=20, ha="right", rotation_mode="anchor")
    ax.set_ylabel("training time to target (s)")
    ax.margins(y=0.2)
    ax.set_title(title(f"Time to {target}", rows), fontsize=10)


def _draw_speedups(ax: Axes, rows: pd.DataFrame, target: str) -> None:
    positions = list(range(len(rows)))
    width = 0.38
    pairs = (
        ("speedup", "samples/s", -width / 2, "0.65"),
        ("time_to_target_speedup", "time to target", width / 2, "tab:green"),
    )
    for column, label, offset, color in pairs:
        values = rows[column].to_numpy(dtype=float)
        shown = [0.0 if math.isnan(v) else v for v in values]
        bars = ax.bar([p + offset for p in positions], shown, width, color=color, label=label)
        ax.bar_label(
            bars,
            labels=["–" if math.isnan(v) else f"{v:.2f}" for v in values],  # the axis says speedup
            fontsize=8,
            padding=2,
        )
    ax.axhline(1.0, color="0.3", linewidth=0.8)
    ax.set_xticks(positions, _bar_labels(rows), rotation=20, ha="right", rotation_mode="anchor")
    ax.set_ylabel("speedup over the single-device run")
    ax.margins(y=0.2)
    ax.legend(fontsize=8, loc="upper left")
    heading = title(f"Speedup in samples/s and in time to {target}", rows)
    ax.set_title("\n".join([heading, *_dash_notes(rows)]), fontsize=10)


def _dash_notes(rows: pd.DataFrame) -> list[str]:
    """What a "–" bar label means, said only when one is drawn."""
    notes = []
    if rows["speedup"].isna().any():
        notes.append("– in samples/s: not finished, or no baseline run")
    no_speedup = rows["time_to_target_speedup"].isna()
    if (no_speedup & rows["time_to_target_s"].isna()).any():
        notes.append("– in time to target: target not reached")
    if (no_speedup & rows["time_to_target_s"].notna()).any():
        notes.append("– in time to target: the baseline run did not reach the target")
    return notes
