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

from ..runs.results import RunResult
from .style import DisplayFigure

MIB = 2**20
STATE_COLOUR = "tab:blue"
ACTIVATION_COLOUR = "tab:orange"
PEAK_COLOUR = "0.55"


def memory_figure(results: Sequence[RunResult]) -> DisplayFigure:
    """Per-device state (left) and measured peak (right) of every run that recorded them."""
    figure = DisplayFigure(figsize=(13.0, 4.2), layout="constrained")
    state_axis, peak_axis = figure.subplots(1, 2)
    _draw_state(state_axis, results)
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


def _draw_state(axis: Axes, results: Sequence[RunResult]) -> None:
    positions, ticks, groups, state, held = _bars(results, _state_by_device)
    axis.set_title("Parameters + optimizer state per device\n(+ activations a stage holds)")
    axis.set_ylabel("MiB")
    if not positions:
        _nothing(axis, "no run recorded its state")
        return
    axis.bar(positions, state, color=STATE_COLOUR, label="parameters + optimizer state")
    if any(held):
        axis.bar(positions, held, bottom=state, color=ACTIVATION_COLOUR, label="activations held")
    _label_runs(axis, ticks, positions, groups)
    axis.legend(fontsize=8, loc="upper right")


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
    _label_runs(axis, ticks, positions, groups)
    if sources:
        axis.set_xlabel("device index, grouped by run · source: " + "; ".join(sources), labelpad=36)


def _nothing(axis: Axes, text: str) -> None:
    axis.text(0.5, 0.5, text, ha="center", va="center", transform=axis.transAxes)
    axis.set_xticks([])
