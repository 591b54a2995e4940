"""Memory per device, one bar per device of each run: what the model puts there, and the peak.

Two panels, never mixed, because they measure different things. Left: parameters and optimizer
state per device (what a data-parallel replica copies and what model parallelism divides), with
the activations a pipeline stage holds stacked on top. Right: the measured peak per device; on
virtual CPU devices that is the worker process's peak, shared by all of them, so the title says
it is an upper bound. Plain results in, a figure out: no TensorFlow, drawable from the run log.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes

from ..runs.results.run_result import RunResult
from .style import DisplayFigure

MIB = 2**20
STATE_COLOUR = "tab:blue"
ACTIVATION_COLOUR = "tab:orange"
PEAK_COLOUR = "0.55"


HEADROOM = 1.35  # the top of each panel over its tallest bar: room for the legend, above them


def memory_figure(results: Sequence[RunResult], budget_bytes: float | None = None) -> DisplayFigure:
    """Per-device state (left) and measured peak (right) of every run that recorded them;
    `budget_bytes` (a run's `memory_budget`) is drawn on the state panel as a dashed line."""
    figure = DisplayFigure(figsize=(11.0, 4.2), layout="constrained")
    state_axis, peak_axis = figure.subplots(1, 2)
    _draw_state(state_axis, results, budget_bytes)
    _draw_peak(peak_axis, [r for r in results if r.ok and r.peak_memory_bytes])
    return figure


Bars = tuple[list[float], list[str], list[tuple[float, str]], list[float], list[float]]


def _bars(results: Sequence[RunResult], values) -> Bars:
    """Positions (a gap between runs), device tick labels, run labels at their groups' centres,
    and the two MiB figures of each device of each run."""
    positions, ticks, groups, first, second = [], [], [], [], []
    x = 0.0
    for result in results:
        per_device = values(result)
        if not per_device:
            continue
        start = x
        for device, (a, b) in per_device.items():
            positions.append(x)
            ticks.append(device.rsplit(":", 1)[-1])
            first.append(a / MIB)
            second.append(b / MIB)
            x += 1.0
        groups.append(((start + x - 1.0) / 2, f"{result.strategy}\n×{result.devices}"))
        x += 1.2  # the gap that separates one run from the next
    return positions, ticks, groups, first, second


def _label_runs(axis: Axes, ticks: list[str], positions, groups) -> None:
    axis.set_xticks(positions, ticks, fontsize=8)
    for centre, label in groups:
        axis.annotate(
            label,
            xy=(centre, 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -22),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=9,
        )
    axis.set_xlabel("device index, grouped by run", labelpad=36)


def _state_by_device(result: RunResult) -> dict[str, tuple[int, int]]:
    stages = result.extra.get("stages") or []
    activations = {s["device"]: s.get("activation_bytes_held") or 0 for s in stages}
    state = result.extra.get("state_bytes") or {}
    return {device: (bytes_, activations.get(device, 0)) for device, bytes_ in state.items()}


def _draw_state(axis: Axes, results: Sequence[RunResult], budget_bytes: float | None) -> None:
    positions, ticks, groups, state, held = _bars(results, _state_by_device)
    axis.set_title("Parameters + optimizer state per device\n(+ activations a stage holds)")
    axis.set_ylabel("MiB")
    if not positions:
        _nothing(axis, "no run recorded its state")
        return
    axis.bar(positions, state, color=STATE_COLOUR, label="parameters + optimizer state")
    # Only devices that hold activations get the stacked bar: an empty one on top of a device's
    # state would pin the axis's top to that state (a bar's base is sticky) and cut the bar off.
    stacked = [i for i, h in enumerate(held) if h > 0]
    if stacked:
        axis.bar(
            [positions[i] for i in stacked],
            [held[i] for i in stacked],
            bottom=[state[i] for i in stacked],
            color=ACTIVATION_COLOUR,
            label="activations held",
        )
    tallest = max(s + h for s, h in zip(state, held, strict=True))
    if budget_bytes:
        budget = budget_bytes / MIB
        axis.axhline(budget, linestyle="--", color="tab:red", label="memory budget")
        tallest = max(tallest, budget)
    _label_runs(axis, ticks, positions, groups)
    _legend_above_bars(axis, tallest)


def _legend_above_bars(axis: Axes, tallest: float) -> None:
    """The legend in one row across the top, in headroom kept free of bars."""
    axis.set_ylim(0, (tallest or 1.0) * HEADROOM)
    entries = len(axis.get_legend_handles_labels()[1])
    axis.legend(fontsize=8, loc="upper left", ncols=entries, frameon=False)


def _draw_peak(axis: Axes, results: Sequence[RunResult]) -> None:
    positions, ticks, groups, peak, _ = _bars(
        results, lambda r: {d: (b, 0) for d, b in sorted(r.peak_memory_bytes.items())}
    )
    sources = sorted({r.memory_source for r in results if r.memory_source})
    shared = any("shared" in source for source in sources)
    axis.set_title(
        "Measured peak per device"
        + ("\n(one process shared by its virtual devices: an upper bound each)" if shared else "")
    )
    axis.set_ylabel("MiB")
    if not positions:
        _nothing(axis, "no finished run measured its memory")
        return
    axis.bar(positions, peak, color=PEAK_COLOUR)
    axis.set_ylim(0, max(peak) * 1.1 or 1.0)
    _label_runs(axis, ticks, positions, groups)
    if sources:
        axis.set_xlabel("device index, grouped by run · source: " + "; ".join(sources), labelpad=36)


def _nothing(axis: Axes, text: str) -> None:
    axis.text(0.5, 0.5, text, ha="center", va="center", transform=axis.transAxes)
    axis.set_xticks([])
