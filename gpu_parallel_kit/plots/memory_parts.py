"""Memory per device split into its parts, one stacked bar per run: which part a strategy divides.

Each bar is the run's fullest device (`analysis.tables.memory_by_part.fullest_components`):
parameters, gradients, optimizer state and activations stacked, so data parallelism's copy, fsdp's
shards and a pipeline's stage read side by side. A run refused by its memory budget is drawn faded,
labelled refused, at what it would have needed. A named device's memory is drawn as a line across.
Plain results in, a figure out: no TensorFlow, drawable from the run log.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Sequence

import pandas as pd
from matplotlib.colors import to_rgba
from matplotlib.patches import Patch

from ..analysis.tables.memory_by_part import COMPONENTS, fullest_components
from ..runs.results.run_result import RunResult
from ..strategies import has
from ..strategies.expert import DENSE, DISPATCHED
from .style import DisplayFigure, run_labels

MIN_WIDTH_IN = 6.5  # room for the legend's three columns and the note under the bars
LEGEND_ROOM = 1.45  # the y axis reaches this times the tallest bar
NOTE_CHARS_PER_IN = 14  # characters of the 8-point note per inch of figure

PARTS = {
    "params_bytes": ("parameters", "tab:blue"),
    "grads_bytes": ("gradients", "tab:purple"),
    "optimizer_bytes": ("optimizer state", "tab:green"),
    "activations_bytes": ("activations", "tab:orange"),
}


def components_figure(
    results: Sequence[RunResult], lines: Sequence[tuple[float, str]] = ()
) -> DisplayFigure:
    """One stacked bar per finished measured run; `lines` (bytes, label) drawn across, e.g. a
    device's memory or the runs' memory budget."""
    runs = [r for r in results if (r.ok or r.extra.get("refused")) and not r.projected]
    parts = [fullest_components(_as_measured(r)) for r in runs]
    shown = [(r, p) for r, p in zip(runs, parts, strict=True) if not math.isnan(p["params_bytes"])]
    refused = [not r.ok for r, _ in shown]
    width = max(MIN_WIDTH_IN, 1.2 * len(shown) + 3.0)
    figure = DisplayFigure(figsize=(width, 4.4), layout="constrained")
    axis = figure.subplots()
    axis.set_title("Memory per device, by part (the fullest device of each run)")
    if not shown:
        axis.text(0.5, 0.5, "no run recorded its memory", ha="center", transform=axis.transAxes)
        axis.set_xticks([])
        return figure
    tallest = max(_total(p) for _, p in shown)
    highest = max([tallest, *(b for b, _ in lines)])
    scale, unit = (2**30, "GiB") if highest > 2 * 2**30 else (2**20, "MiB")
    positions = list(range(len(shown)))
    bottom = [0.0] * len(shown)
    for part in COMPONENTS:
        label, colour = PARTS[part]
        values = [(p[part] if not math.isnan(p[part]) else 0.0) / scale for _, p in shown]
        axis.bar(
            positions,
            values,
            bottom=bottom,
            color=[_faded(colour) if r else colour for r in refused],
            edgecolor=[colour if r and v else "none" for r, v in zip(refused, values, strict=True)],
            label=label,
        )
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for (level, label), colour in zip(lines, ("tab:red", "0.3"), strict=False):
        axis.axhline(level / scale, linestyle="--", color=colour, label=label)
    frame = pd.DataFrame(
        {
            "strategy": [r.strategy for r, _ in shown],
            "devices": [r.devices for r, _ in shown],
            "backend": [r.backend for r, _ in shown],
            "mesh": [r.mesh for r, _ in shown],
            "experts": [(r.extra.get("experts") or {}).get("kind", "") for r, _ in shown],
            "experiment_id": [r.experiment_id for r, _ in shown],
            "projected": [False] * len(shown),
        }
    )
    labels = [
        f"{label}\nrefused" if r else label
        for label, r in zip(run_labels(frame), refused, strict=True)
    ]
    # Upright labels, one per bar's slot; a label wider than its slot goes on two lines.
    axis.set_xticks(positions, [label.replace(" ", "\n", 1) for label in labels], fontsize=9)
    axis.set_xlim(-0.75, len(shown) - 0.25)
    axis.set_ylabel(unit)
    top = max([*bottom, *(b / scale for b, _ in lines)])
    axis.set_ylim(0, top * LEGEND_ROOM or 1.0)  # the legend's rows sit above the tallest bar
    lines_drawn, _ = axis.get_legend_handles_labels()
    handles = [*lines_drawn[: len(lines)], *(Patch(color=c, label=n) for n, c in PARTS.values())]
    axis.legend(handles=handles, fontsize=8, loc="upper left", ncols=3, frameon=False)
    note = _note([r for r, _ in shown], any(math.isnan(p["activations_bytes"]) for _, p in shown))
    axis.set_xlabel(textwrap.fill(note, int(width * NOTE_CHARS_PER_IN)), fontsize=8)
    return figure


def _note(runs: Sequence[RunResult], unknown: bool) -> str:
    """Where each part comes from, for the runs drawn: a pipeline's held activations only where
    a run is pipelined, the experts' only where a run has them."""
    held = []
    if any(has(r.strategy, "stages") for r in runs):
        held.append("held by a pipeline's schedule")
    kinds = {(r.extra.get("experts") or {}).get("kind") for r in runs}
    if DENSE in kinds:
        held.append("a dense expert bank's outputs for every expert and token")
    if DISPATCHED in kinds:
        held.append("dispatched experts' outputs for their capacity's slots only")
    return (
        "parameters and optimizer state as placed; gradients modelled; activations modelled"
        + (f": {', '.join(held)}" if held else "")
        + ("; none where not known" if unknown else "")
    )


def _as_measured(result: RunResult) -> RunResult:
    """A refused run as the memory it would have needed (`extra["refused"]`, kept by the
    worker's budget check); a finished run as it is."""
    if result.ok:
        return result
    return dataclasses.replace(result, extra=result.extra["refused"])


def _faded(colour: str) -> tuple[float, float, float, float]:
    red, green, blue, _ = to_rgba(colour)
    return (red, green, blue, 0.25)


def _total(parts: dict[str, float]) -> float:
    return sum(v for v in parts.values() if not math.isnan(v))
