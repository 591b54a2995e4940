"""Memory per device split into its parts, one stacked bar per run: which part a strategy divides.

Each bar is the run's fullest device (`analysis.memory.fullest_components`): parameters,
gradients, optimizer state and activations stacked, so data parallelism's copy, fsdp's shards and
a pipeline's stage read side by side. A run refused by its memory budget is drawn faded, labelled
refused, at what it would have needed. A named device's memory is drawn as a line across. Plain
results in, a figure out: no TensorFlow, drawable from the run log.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import pandas as pd
from matplotlib.colors import to_rgba
from matplotlib.patches import Patch

from ..analysis.memory import COMPONENTS, fullest_components
from ..runs.results import RunResult
from .style import DisplayFigure, run_labels

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
    figure = DisplayFigure(figsize=(max(5.0, 1.1 * len(shown) + 2.5), 4.2), layout="constrained")
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
            "experiment_id": [r.experiment_id for r, _ in shown],
            "projected": [False] * len(shown),
        }
    )
    labels = [
        f"{label}\nrefused" if r else label
        for label, r in zip(run_labels(frame), refused, strict=True)
    ]
    axis.set_xticks(positions, labels, rotation=20, ha="right", fontsize=9)
    axis.set_ylabel(unit)
    top = max(max(bottom), *(b / scale for b, _ in lines))
    axis.set_ylim(0, top * 1.3 or 1.0)
    lines_drawn, _ = axis.get_legend_handles_labels()
    handles = [*lines_drawn[: len(lines)], *(Patch(color=c, label=n) for n, c in PARTS.values())]
    axis.legend(handles=handles, fontsize=8, loc="upper left", ncols=6, frameon=False)
    unknown = any(math.isnan(p["activations_bytes"]) for _, p in shown)
    axis.set_xlabel(
        "parameters and optimizer state as placed; gradients modelled; activations modelled on "
        "JAX, held by a pipeline's schedule" + ("; none where not known" if unknown else ""),
        fontsize=8,
    )
    return figure


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
