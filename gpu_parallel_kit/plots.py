"""Figures of the comparison table: wall time, throughput and speedup per run.

The figures are built with the object API (`matplotlib.figure.Figure`), never pyplot, so they need
no GUI backend or global figure state: the same code draws inline in a notebook, writes PNGs from
the command line on a headless machine, and leaks no figures between calls.

Runs that did not finish are drawn, not dropped: a hatched empty bar labelled with the status, so a
comparison whose 4-device run ran out of memory says so instead of quietly showing three bars.
Every title says which scaling the runs used and whether the devices were virtual, because a
speedup measured on virtual devices carved out of one CPU means something else than one on GPUs.
"""

from __future__ import annotations

import io

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

COMPARISON_FIGSIZE = (15.0, 4.5)
SINGLE_FIGSIZE = (6.0, 4.5)
_STRATEGY_COLORS = {
    "single": "tab:gray",
    "data": "tab:blue",
    "model": "tab:orange",
    "multiworker": "tab:green",
}
_OTHER_COLOR = "tab:purple"
_MISSING_STYLE = {"fill": False, "hatch": "//", "edgecolor": "0.55", "linewidth": 1.0}


class DisplayFigure(Figure):
    """A Figure that shows itself inline in Jupyter without pyplot's global state.

    Figures built with the object API have no inline renderer unless pyplot's inline backend is
    active; returning PNG bytes here makes `cmp.plot()` display in any notebook or Voila page.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
        return buffer.getvalue()


def wall_time_figure(df: pd.DataFrame) -> Figure:
    """Training wall time of each run, one bar per run."""
    figure = DisplayFigure(figsize=SINGLE_FIGSIZE, layout="constrained")
    _draw_wall_time(figure.subplots(), df)
    return figure


def throughput_figure(df: pd.DataFrame) -> Figure:
    """Throughput (samples/s) of each run, one bar per run."""
    figure = DisplayFigure(figsize=SINGLE_FIGSIZE, layout="constrained")
    _draw_throughput(figure.subplots(), df)
    return figure


def speedup_figure(df: pd.DataFrame) -> Figure:
    """Speedup against device count, one line per strategy, with the ideal y = x dashed."""
    figure = DisplayFigure(figsize=SINGLE_FIGSIZE, layout="constrained")
    _draw_speedup(figure.subplots(), df)
    return figure


def comparison_figure(df: pd.DataFrame) -> Figure:
    """Wall time, throughput and speedup side by side: the one picture of a comparison."""
    figure = DisplayFigure(figsize=COMPARISON_FIGSIZE, layout="constrained")
    wall_ax, throughput_ax, speedup_ax = figure.subplots(1, 3)
    _draw_wall_time(wall_ax, df)
    _draw_throughput(throughput_ax, df)
    _draw_speedup(speedup_ax, df)
    return figure


def _draw_wall_time(ax: Axes, df: pd.DataFrame) -> None:
    _draw_bars(ax, df, "wall_time_s", "wall time (s)", "Wall time")


def _draw_throughput(ax: Axes, df: pd.DataFrame) -> None:
    _draw_bars(ax, df, "throughput_samples_s", "throughput (samples/s)", "Throughput")


def _title(text: str, df: pd.DataFrame) -> str:
    """`text` with the scaling mode and, when any run used virtual devices, "(virtual devices)"."""
    notes = []
    if "scaling" in df.columns:
        modes = [mode for mode in dict.fromkeys(df["scaling"]) if isinstance(mode, str) and mode]
        if modes:
            notes.append(" and ".join(modes) + " scaling")
    if "virtual" in df.columns and df["virtual"].astype(bool).any():
        notes.append("(virtual devices)")
    return f"{text}\n{' '.join(notes)}" if notes else text


def _run_labels(df: pd.DataFrame) -> list[str]:
    """Bar labels such as "data×2"."""
    return [
        f"{strategy}×{devices}"
        for strategy, devices in zip(df["strategy"], df["devices"], strict=True)
    ]


def _draw_bars(ax: Axes, df: pd.DataFrame, column: str, ylabel: str, heading: str) -> None:
    ax.set_title(_title(heading, df))
    ax.set_ylabel(ylabel)
    if df.empty:
        _say_no_runs(ax)
        return
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    done = (df["status"] == "ok").to_numpy() & ~pd.isna(values)
    positions = list(range(len(df)))
    colors = [_STRATEGY_COLORS.get(s, _OTHER_COLOR) for s in df["strategy"]]
    measured = ax.bar(
        [p for p, d in zip(positions, done, strict=True) if d],
        values[done],
        color=[c for c, d in zip(colors, done, strict=True) if d],
    )
    ax.bar_label(measured, labels=[_value_text(v) for v in values[done]], fontsize=8, padding=2)
    # A missing figure gets a ghost bar as tall as the tallest measured one, so it is seen.
    height = float(values[done].max()) if done.any() else 1.0
    for position, status, ok in zip(positions, df["status"], done, strict=True):
        if not ok:
            ax.bar(position, height, **_MISSING_STYLE)
            label = "no data" if status == "ok" else str(status)
            ax.text(position, height / 2, label, rotation=90, ha="center", va="center")
    crowded = len(df) > 6
    ax.set_xticks(
        positions,
        _run_labels(df),
        rotation=35 if crowded else 0,
        ha="right" if crowded else "center",
        rotation_mode="anchor",
    )
    ax.margins(y=0.12)


def _draw_speedup(ax: Axes, df: pd.DataFrame) -> None:
    ax.set_title(_title("Speedup", df))
    ax.set_ylabel("speedup (vs 1 device)")
    if df.empty:
        _say_no_runs(ax)
        return
    plotted = (df["status"] == "ok") & df["speedup"].notna()
    several = {key: df[key].nunique() > 1 for key in ("experiment_id", "scaling")}
    for _, group in df[plotted].groupby(_series_keys(df), sort=False, dropna=False):
        ordered = group.sort_values("devices")
        strategy = ordered["strategy"].iloc[0]
        ax.plot(
            ordered["devices"],
            ordered["speedup"],
            marker="s" if ordered["scaling"].iloc[0] == "weak" else "o",
            linestyle=":" if ordered["scaling"].iloc[0] == "weak" else "-",
            color=_STRATEGY_COLORS.get(strategy, _OTHER_COLOR),
            label=_series_label(ordered, several),
        )
    counts = sorted(int(n) for n in df["devices"].unique() if n > 0)
    top = max(counts, default=1)
    ax.plot([1, top], [1, top], linestyle="--", color="0.5", label="ideal")
    ax.set_xticks(counts or [1])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("devices" + _unplotted_note(df[~plotted]))
    ax.legend(loc="upper left", fontsize=8)


def _series_keys(df: pd.DataFrame) -> list[pd.Series]:
    # One line per strategy (and schedule, for pipelines) within one experiment and scaling, so
    # points that are not comparable are never joined into one zigzag.
    return [df["experiment_id"], df["scaling"], df["strategy"], df["schedule"]]


def _series_label(group: pd.DataFrame, several: dict[str, bool]) -> str:
    first = group.iloc[0]
    label = str(first["strategy"])
    if isinstance(first["schedule"], str) and first["schedule"]:
        label += f" ({first['schedule']})"
    if several["scaling"]:
        label += f", {first['scaling']}"
    if several["experiment_id"]:
        label += f" [{first['experiment_id']}]"
    return label


def _unplotted_note(missing: pd.DataFrame) -> str:
    """A second x-label line naming the runs without a speedup point, so none vanish silently."""
    if missing.empty:
        return ""
    names = [
        f"{label} ({status if status != 'ok' else 'no baseline'})"
        for label, status in zip(_run_labels(missing), missing["status"], strict=True)
    ]
    return "\nno speedup: " + ", ".join(names)


def _value_text(value: float) -> str:
    # 3 significant digits, but never "3.5e+03" on a bar: throughput runs into thousands.
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _say_no_runs(ax: Axes) -> None:
    ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
