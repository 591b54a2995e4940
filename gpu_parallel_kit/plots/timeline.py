"""Gantt charts of a pipeline step: one lane per device, one bar per task, coloured by micro-batch.

The planned chart (the schedule with unit durations), the measured one (what ran here) and the
simulated one (measured task times replayed on independent devices) sit side by side, each
titled with what it is, so the bubble can be seen rather than read. Where a stage lives on a
sub-mesh of several devices (`lane_devices` in the run's figures), its lane is named for the
stage: "stage 0 (4 devices)".
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
        _draw(axis, tasks, micro_batches, extra.get("lane_devices"))
        axis.set_xlim(left=0)  # every view starts at the step's start
        axis.set_title(label, fontsize=10, loc="left")
        axis.set_xlabel(unit)
    figure.legend(handles=_legend(micro_batches, weight), loc="outside right upper", fontsize=8)
    figure.suptitle(title)
    return figure


def lane_label(
    lane: int, tasks: Sequence[dict[str, Any]], lane_devices: Sequence[int] | None
) -> str:
    """A lane's name: "device 1", or "stage 1 (4 devices)" where the lane's stages each live
    on several devices (`lane_devices`: per lane, how many; none given, one each)."""
    count = lane_devices[lane] if lane_devices else 1
    if count <= 1:
        return f"device {lane}"
    stages = sorted({t["stage"] for t in tasks if t["device"] == lane})
    named = "stage" if len(stages) == 1 else "stages"
    return f"{named} {', '.join(map(str, stages))} ({count} devices)"


def _draw(
    axis, tasks: Sequence[dict[str, Any]], micro_batches: int, lane_devices: Sequence[int] | None
) -> None:
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
    axis.set_yticks(devices, [lane_label(d, tasks, lane_devices) for d in devices])
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
