"""Gantt charts of a pipeline step: one lane per device, one bar per task, coloured by micro-batch.

The planned chart (the schedule with unit durations), the measured one (what ran here) and the
simulated one (measured task times replayed on independent devices) sit side by side, each
titled with what it is, so the bubble can be seen rather than read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.patches import Patch

from .style import DisplayFigure

HATCHES = {"forward": None, "backward": "//", "weight": ".."}
PANELS = (
    ("planned_timeline", "planned (forward 1, backward 2 time units)", "time units"),
    ("timeline", "measured on these devices", "seconds from the step's start"),
    (
        "simulated_timeline",
        "simulated: each task's time measured alone, replayed on independent devices",
        "seconds",
    ),
)


def timeline_figure(extra: dict[str, Any], title: str) -> DisplayFigure:
    """The three views of one run's pipeline step (the first timed step for the measured one)."""
    panels = [(key, label, unit) for key, label, unit in PANELS if extra.get(key)]
    if not panels:
        raise ValueError("this run recorded no pipeline timeline (only strategy='model' does)")
    # 11 inches wide, as the other figures: a notebook shows it at nearly full size.
    figure = DisplayFigure(figsize=(11, 2.1 * len(panels) + 0.8), layout="constrained")
    axes = figure.subplots(len(panels), 1, squeeze=False)[:, 0]
    micro_batches = 1 + max(t["micro_batch"] for t in extra[panels[0][0]])
    weight = any(t["kind"] == "weight" for key, _, _ in panels for t in extra[key])
    for axis, (key, label, unit) in zip(axes, panels, strict=True):
        if key == "planned_timeline" and weight:
            label = "planned (forward, input gradient and weight gradient 1 time unit each)"
        tasks = extra[key]
        if key == "timeline":
            tasks = [t for t in tasks if t.get("step", 0) == 0]
        _draw(axis, tasks, micro_batches)
        axis.set_xlim(left=0)  # every view starts at the step's start
        axis.set_title(label, fontsize=10, loc="left")
        axis.set_xlabel(unit)
    figure.legend(handles=_legend(micro_batches, weight), loc="outside right upper", fontsize=8)
    figure.suptitle(title)
    return figure


def _draw(axis, tasks: Sequence[dict[str, Any]], micro_batches: int) -> None:
    colours = _colours(micro_batches)
    devices = sorted({t["device"] for t in tasks})
    for task in tasks:
        axis.barh(
            task["device"],
            task["end"] - task["start"],
            left=task["start"],
            height=0.8,
            color=colours[task["micro_batch"]],
            edgecolor="black",
            linewidth=0.4,
            hatch=HATCHES.get(task["kind"]),
        )
    axis.set_yticks(devices, [f"device {d}" for d in devices])
    axis.invert_yaxis()
    axis.grid(axis="x", alpha=0.3)


def _colours(count: int) -> list:
    from matplotlib import colormaps

    palette = colormaps["tab10" if count <= 10 else "viridis"]
    return [palette(i / max(count - 1, 1)) if count > 10 else palette(i) for i in range(count)]


def _legend(micro_batches: int, weight: bool = False) -> list[Patch]:
    colours = _colours(micro_batches)
    handles = [Patch(color=colours[m], label=f"mb {m}") for m in range(micro_batches)]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="backward"))
    if weight:
        handles.append(
            Patch(facecolor="white", edgecolor="black", hatch="..", label="weight gradient")
        )
    return handles
