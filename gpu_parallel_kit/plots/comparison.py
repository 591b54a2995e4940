"""Figures of the comparison table: training time, throughput and speedup per run.

Training time is the table's steady-state `training_time_s`, compilation left out. A run that
did not finish is a hatched empty bar labelled with its status. Projected rows are drawn apart:
dashed hollow lines, pale dotted bars after a gap, and none in the time panel. Every title says
the scaling, whether the devices were virtual and how projected rows are drawn. Sizes suit a
notebook output about 11 inches wide at 100 dpi; docs/results.md gives the reasons.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath
from matplotlib.ticker import StrMethodFormatter

from ..analysis.cost_model.efficiency_band import band
from ..analysis.tables.row_flags import flagged
from ..backends import Backend, of_row
from .style import (
    DOTTED_BARS,
    DisplayFigure,
    backend_color,
    backend_tags,
    backends_of,
    draw_missing_bars,
    mesh_tag,
    projected_rows,
    projection_label,
    projection_labels,
    run_labels,
    strategy_color,
    title,
)

COMPARISON_FIGSIZE = (11.0, 4.4)
CROWDED_FIGSIZE = (11.0, 8.4)  # two rows: training time and speedup, then throughput across
CROWDED_BARS = 8  # more bars than this do not fit a third of the comparison figure
SINGLE_FIGSIZE = (6.0, 4.5)
_BAR_LABEL_POINTS = 8
_TICK_POINTS = 9
_TEXT = TextToPath()  # measures text in points without drawing it
_PROJECTED_DASHES = ["--", "-.", (0, (6, 2, 1, 2, 1, 2))]  # one per projection in a figure
_PROJECTED_BAR = {"alpha": 0.4, "hatch": "..", "linestyle": "--", "linewidth": 1.0}
_BAND_ALPHA = 0.15  # the shaded band under a projected line: seen, and the line over it read
APART = 100  # bars whose values span this factor get a log axis
LOG_HEADROOM = 8  # on a log axis, the top is this times the tallest bar: room for its label
BAND_NOTE = "efficiency band"  # what a projection's shading and whiskers span, in the legend


TIME_HEADING = "Training time, steady state"
TIME_NOTE = "median step × steps; warm-up and compile left out"


def wall_time_figure(df: pd.DataFrame) -> Figure:
    """Steady-state training time of each run, one bar per run.

    A bar is the table's `training_time_s` (`step_time_s` × `epochs` × `steps_per_epoch`); the
    first steps' tracing and compilation, in `wall_time_s`, are left out.
    """
    figure = DisplayFigure(figsize=SINGLE_FIGSIZE, layout="constrained")
    _draw_training_time(figure.subplots(), df, SINGLE_FIGSIZE[0])
    return figure


def throughput_figure(df: pd.DataFrame) -> Figure:
    """Throughput (samples/s) of each run, one bar per run."""
    figure = DisplayFigure(figsize=SINGLE_FIGSIZE, layout="constrained")
    _draw_throughput(figure.subplots(), df, SINGLE_FIGSIZE[0])
    return figure


def speedup_figure(df: pd.DataFrame) -> Figure:
    """Speedup against device count, one line per strategy, with the ideal y = x dashed."""
    figure = DisplayFigure(figsize=SINGLE_FIGSIZE, layout="constrained")
    _draw_speedup(figure.subplots(), df)
    return figure


def comparison_figure(df: pd.DataFrame) -> Figure:
    """Training time, throughput and speedup side by side: the one picture of a comparison.

    With more bars than a third of the figure holds, throughput gets a row of its own.
    """
    if len(df) > CROWDED_BARS:
        figure = DisplayFigure(figsize=CROWDED_FIGSIZE, layout="constrained")
        axes = figure.subplot_mosaic([["wall", "speedup"], ["throughput", "throughput"]])
        wall_ax, throughput_ax, speedup_ax = axes["wall"], axes["throughput"], axes["speedup"]
        widths = (CROWDED_FIGSIZE[0] / 2, CROWDED_FIGSIZE[0])
    else:
        figure = DisplayFigure(figsize=COMPARISON_FIGSIZE, layout="constrained")
        wall_ax, throughput_ax, speedup_ax = figure.subplots(1, 3)
        widths = (COMPARISON_FIGSIZE[0] / 3,) * 2
    _draw_training_time(wall_ax, df, widths[0])
    _draw_throughput(throughput_ax, df, widths[1])
    _draw_speedup(speedup_ax, df)
    return figure


def _draw_training_time(ax: Axes, df: pd.DataFrame, width_in: float) -> None:
    projected = projected_rows(df)
    shown = df[~projected]
    # Seconds, or milliseconds when every run trained for less than a second: "42.9", not "0.0429".
    seconds = pd.to_numeric(shown["training_time_s"], errors="coerce")
    short = not shown.empty and bool((seconds.dropna() < 1.0).all())
    scale, unit = (1e3, "ms") if short else (1.0, "s")
    shown = shown.assign(training_time_in_unit=seconds * scale)
    _draw_bars(
        ax,
        shown,
        "training_time_in_unit",
        f"training time ({unit})",
        TIME_HEADING,
        width_in,
        text=_value_text if short else _time_text,
    )
    notes = [TIME_NOTE] if not shown.empty else []
    if projected.any():
        # A projection models one step; it trained nothing to compare.
        notes.append(f"{int(projected.sum())} projected row(s) not shown: no training time")
    ax.set_xlabel("\n".join(notes))


def _draw_throughput(ax: Axes, df: pd.DataFrame, width_in: float) -> None:
    found = band(df)
    low, high = found["throughput_low"], found["throughput_high"]
    _draw_bars(
        ax, df, "throughput_samples_s", "throughput (samples/s)", "Throughput", width_in, high
    )
    _log_scale_if_apart(ax, df)
    drawn = (low.notna() & high.notna()).to_numpy()
    if not drawn.any():
        return
    # A projected bar's efficiency band, from the slowest to the fastest GPU step, as a whisker
    # over the bar (its likely value).
    values = pd.to_numeric(df["throughput_samples_s"], errors="coerce").to_numpy(dtype=float)
    ax.errorbar(
        [p for p, d in zip(bar_positions(df), drawn, strict=True) if d],
        values[drawn],
        yerr=[(values - low)[drawn].clip(lower=0), (high - values)[drawn].clip(lower=0)],
        fmt="none",
        ecolor="0.25",
        elinewidth=1.0,
        capsize=3,
        label=BAND_NOTE,
    )
    ax.set_xlabel(f"whiskers: projected {BAND_NOTE}")


def _log_scale_if_apart(ax: Axes, df: pd.DataFrame) -> None:
    """A log axis when the bars' values span 100× or more (a projected GPU's throughput beside
    a CPU's), so the smaller bars stay visible rather than slivers under the largest."""
    values = pd.to_numeric(df["throughput_samples_s"], errors="coerce")
    shown = values[(df["status"] == "ok") & (values > 0)]
    if shown.empty or shown.max() < APART * shown.min():
        return
    ax.set_yscale("log")
    # Room above the tallest bar for its upright value, as the linear axis's margin gives.
    ax.set_ylim(shown.min() / 2, shown.max() * LOG_HEADROOM)
    ax.set_ylabel(f"{ax.get_ylabel()}, log scale")


def bar_positions(df: pd.DataFrame) -> list[float]:
    """One slot per row, and a gap of one slot before each projection's first row, so measured
    and projected bars stand apart."""
    positions, x, previous = [], 0.0, None
    for experiment, is_projected in zip(df["experiment_id"], projected_rows(df), strict=True):
        group = experiment if is_projected else None
        if positions and group != previous:
            x += 1.0
        positions.append(x)
        previous = group
        x += 1.0
    return positions


def _draw_bars(
    ax: Axes,
    df: pd.DataFrame,
    column: str,
    ylabel: str,
    heading: str,
    width_in: float,
    whiskers: pd.Series | None = None,
    text: Callable[[float], str] | None = None,
) -> None:
    """One bar per row; a bar with a whisker (`whiskers`: its top, NaN for none) has its value
    written above the whisker, as `text` writes it (3 significant digits by default)."""
    ax.set_title(title(heading, df, DOTTED_BARS))
    ax.set_ylabel(ylabel)
    if df.empty:
        _say_no_runs(ax)
        return
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    done = (df["status"] == "ok").to_numpy() & ~pd.isna(values)
    positions = bar_positions(df)
    colors = [strategy_color(s) for s in df["strategy"]]
    projected = projected_rows(df).to_numpy()
    texts = [(text or _value_text)(v) for v in values]
    tops = [math.nan] * len(df) if whiskers is None else list(whiskers.to_numpy(dtype=float))
    # Labels are turned only when they are wider than a bar's slot (the axes take the width
    # given less about 0.9 inch of y labels); a projection's tag goes on a second line first.
    slot_points = (width_in - 0.9) * 72 / (max(positions) + 1)
    upright = not _fits(texts, _BAR_LABEL_POINTS, slot_points)
    one_line = run_labels(df)
    tag_under = [label.replace(" [", "\n[") for label in one_line]
    stacked = [label.replace("×", "\n×") for label in tag_under]
    fitting = [c for c in (one_line, tag_under, stacked) if _fits(c, _TICK_POINTS, slot_points)]
    ticks = fitting[0] if fitting else one_line
    crowded = not fitting
    for kind, style in ((~projected, {}), (projected, _PROJECTED_BAR)):
        chosen = done & kind
        bars = ax.bar(
            [p for p, c in zip(positions, chosen, strict=True) if c],
            values[chosen],
            color=[c for c, keep in zip(colors, chosen, strict=True) if keep],
            edgecolor=[c for c, keep in zip(colors, chosen, strict=True) if keep]
            if style
            else None,
            **style,
        )
        kept = zip(positions, texts, tops, chosen, strict=True)
        rows = [(x, t, top) for x, t, top, c in kept if c]
        label = {"fontsize": _BAR_LABEL_POINTS, "rotation": 90 if upright else 0}
        # A whiskered bar's value goes over its whisker, where it cannot cross the cap.
        ax.bar_label(bars, [t if math.isnan(top) else "" for _, t, top in rows], padding=2, **label)
        for x, text, top in rows:
            if not math.isnan(top):
                ax.annotate(
                    text, (x, top), (0, 4), textcoords="offset points", ha="center", **label
                )
    draw_missing_bars(ax, positions, df["status"], done, values, "no data")
    ax.set_xticks(
        positions,
        ticks,
        rotation=35 if crowded else 0,
        ha="right" if crowded else "center",
        rotation_mode="anchor",
        fontsize=_TICK_POINTS,
    )
    ax.margins(y=0.4 if upright else 0.12)  # an upright "1,939,394" is ~45 points tall
    if values[done].size and values[done].max() >= 10_000:
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def _fits(labels: list[str], points: float, slot_points: float) -> bool:
    """Whether every line of every label, as the default font draws it, leaves a few points free
    in a bar's slot."""
    font = FontProperties(size=points)
    widths = [
        _TEXT.get_text_width_height_descent(line, font, ismath=False)[0]
        for label in labels
        for line in label.split("\n")
    ]
    return max(widths, default=0.0) + 10 <= slot_points  # room between neighbours, too


def _draw_speedup(ax: Axes, df: pd.DataFrame) -> None:
    ax.set_title(title("Speedup", df))
    ax.set_ylabel("speedup (vs 1 device)")
    if df.empty:
        _say_no_runs(ax)
        return
    plotted = (df["status"] == "ok") & df["speedup"].notna()
    # A projected single device is the (1, 1) every projected line starts from: no own entry.
    shown = plotted & ~(projected_rows(df) & flagged(df, "baseline"))
    dashes = dict(zip(projection_labels(df), _PROJECTED_DASHES * len(df), strict=False))
    measured = df[~projected_rows(df)]
    several = {key: measured[key].nunique() > 1 for key in ("experiment_id", "scaling")}
    several["micro_batches"] = df.loc[plotted, "micro_batches"].nunique() > 1
    several["backend"] = any(backend_tags(df))
    mixed = len(backends_of(df)) > 1  # each backend's lines then drawn in its own shade
    bands = band(df)
    for _, group in df[shown].groupby(_series_keys(df), sort=False, dropna=False):
        ordered = group.sort_values("devices")
        strategy = ordered["strategy"].iloc[0]
        weak = ordered["scaling"].iloc[0] == "weak"
        on = _backend_of(ordered)
        color = backend_color(strategy_color(strategy), on) if mixed else strategy_color(strategy)
        projected = bool(projected_rows(ordered).iloc[0])
        if projected:
            _draw_band(ax, bands.loc[ordered.index], ordered["devices"], color)
        ax.plot(
            ordered["devices"],
            ordered["speedup"],
            marker="s" if weak else on.marker,
            linestyle=dashes[projection_label(ordered["experiment_id"].iloc[0])]
            if projected
            else ":"
            if weak
            else "-",
            color=color,
            markerfacecolor="none" if projected else color,
            label=_series_label(ordered, several, projected),
        )
    counts = sorted(int(n) for n in df["devices"].unique() if n > 0)
    top = max(counts, default=1)
    ax.plot([1, top], [1, top], linestyle="--", color="0.5", label="ideal")
    ax.set_xticks(counts or [1])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("devices" + _unplotted_note(df[~plotted]))
    ax.legend(loc="upper left", fontsize=8)


def _draw_band(ax: Axes, found: pd.DataFrame, devices: pd.Series, color: str) -> None:
    """The speedups of the efficiency band's two ends, shaded around a projected line; the
    legend names the band once."""
    if found["speedup_low"].isna().all():
        return
    named = any(c.get_label() == BAND_NOTE for c in ax.collections)
    ax.fill_between(
        devices,
        found["speedup_low"],
        found["speedup_high"],
        color=color,
        alpha=_BAND_ALPHA,
        linewidth=0,
        label="_" if named else BAND_NOTE,
    )


def _backend_of(group: pd.DataFrame) -> Backend:
    return of_row(group["backend"].iloc[0] if "backend" in group.columns else None)


def _series_keys(df: pd.DataFrame) -> list[pd.Series]:
    # One line per strategy (and schedule, for pipelines) within one experiment and scaling, so
    # points that are not comparable are never joined into one zigzag.
    # Projected rows have their own experiment id, so they never join a measured line.
    return [
        df["experiment_id"],
        df["backend"] if "backend" in df.columns else df["scaling"],
        df["scaling"],
        df["strategy"],
        # A 2-D mesh is its own line; "1xN" (every device on the model axis) is the default one.
        df["mesh"].map(lambda m: m if mesh_tag(m) else "")
        if "mesh" in df.columns
        else df["scaling"],
        df["schedule"],
        df["micro_batches"],
    ]


def _series_label(group: pd.DataFrame, several: dict[str, bool], projected: bool) -> str:
    first = group.iloc[0]
    label = str(first["strategy"])
    if several["backend"]:
        label += f" {of_row(first['backend']).tag}"
    if mesh_tag(first.get("mesh", "")):
        label += f" {first['mesh']}"
    if isinstance(first["schedule"], str) and first["schedule"]:
        m = first["micro_batches"]
        label += (
            f" ({first['schedule']}, M={m})"
            if several["micro_batches"]
            else f" ({first['schedule']})"
        )
    if several["scaling"]:
        label += f", {first['scaling']}"
    experiment = str(first["experiment_id"])
    if projected:
        label += f", projected {projection_label(experiment)}"
        experiment = experiment.rsplit(":", 1)[0]
    if several["experiment_id"]:
        label += f" [{experiment}]"
    return label


def _unplotted_note(missing: pd.DataFrame) -> str:
    """A second x-label line naming the runs without a speedup point, so none vanish silently."""
    if missing.empty:
        return ""
    names = [
        f"{label} ({status if status != 'ok' else 'no baseline'})"
        for label, status in zip(run_labels(missing), missing["status"], strict=True)
    ]
    return "\nno speedup: " + ", ".join(names)


def _value_text(value: float) -> str:
    # 3 significant digits, but never "3.5e+03" on a bar: throughput runs into thousands.
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _time_text(seconds: float) -> str:
    """A time in seconds with its unit, in ms under a second: on an axis of seconds, a short
    run's bar reads "25.9 ms", not "0.0259"."""
    if math.isnan(seconds):
        return ""
    return f"{seconds * 1e3:.3g} ms" if seconds < 1.0 else f"{_value_text(seconds)} s"


def _say_no_runs(ax: Axes) -> None:
    ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
