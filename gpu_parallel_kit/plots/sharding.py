"""Tensor parallelism drawn: each kernel cut into the shards its devices hold, and what the cut
costs in communication against what it saves in memory.

Plain results in, figures out: the layout is the one the run placed (`extra["layout"]`, each
weight's axes and the shape of one device's shard, read from the arrays), never recomputed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from ..analysis.tables.traffic_table import traffic_rows, traffic_table
from ..runs.results.run_result import RunResult
from ..strategies import has
from .style import DisplayFigure, mesh_tag, run_labels, strategy_color

MIB = 2**20
DEVICE_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")
REPLICATED = "0.8"
MAX_KERNELS = 8
ROLE_TEXT = {
    "column": "column split: each device its output features",
    "row": "row split: each device its input features",
    "heads": "heads split",
    "vocabulary": "vocabulary split",
    "features": "feature split",
    "replicated": "replicated: whole on every device",
    "user": "the user's layout",
}


def layout_figure(result: RunResult) -> DisplayFigure:
    """The run's kernels as rectangles (rows: input features, columns: output features), each
    cut into the pieces the devices hold, one colour per device along the model axis."""
    kernels = [p for p in result.extra.get("layout", []) if len(p["shape"]) >= 2]
    shown = kernels[:MAX_KERNELS]
    columns = min(4, max(1, len(shown)))
    rows = max(1, math.ceil(len(shown) / columns))
    figure = DisplayFigure(figsize=(2.9 * columns, 2.7 * rows + 0.6), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    model_axis = _model_axis(result)
    for axis, placement in zip(axes, shown, strict=False):
        _draw_kernel(axis, placement, model_axis)
    for axis in axes[len(shown) :]:
        axis.set_visible(False)
    if not shown:
        axes[0].set_visible(True)
        axes[0].text(0.5, 0.5, "no layout in this run", ha="center", va="center")
        axes[0].set_axis_off()
    more = f" (first {MAX_KERNELS} of {len(kernels)} kernels)" if len(kernels) > len(shown) else ""
    mesh = f", mesh {result.mesh} (data x model)" if result.mesh else ""
    figure.suptitle(
        f"{result.strategy}×{result.devices}{mesh}: one colour per device on the model axis{more}",
        fontsize=10,
    )
    return figure


def sharding_cost_figure(results: Sequence[RunResult]) -> DisplayFigure:
    """Left: parameters and optimizer state on the fullest device. Right: bytes moved in and out
    of the fullest device per step, the `per_device_bytes` column of `traffic_table` (the
    layout's ring counts, the all-reduce's, a pipeline's cuts). One bar per run."""
    # One device moves nothing: a 1-device data run would only repeat the single run's bar.
    runs = [r for r in traffic_rows(results) if r.extra.get("state_bytes")]
    moved = traffic_table(runs)
    figure = DisplayFigure(figsize=(11.0, 3.8), layout="constrained")
    state_axis, traffic_axis = figure.subplots(1, 2)
    labels = [
        f"{label} {r.mesh}" if r.mesh and not mesh_tag(r.mesh) else label
        for label, r in zip(run_labels(moved) if runs else [], runs, strict=True)
    ]
    state = [max(r.extra["state_bytes"].values()) / MIB for r in runs]
    traffic = [value / MIB for value in moved["per_device_bytes"]]
    colours = [
        strategy_color(r.strategy) if has(r.strategy, "layout") else DEVICE_COLOURS[0] for r in runs
    ]
    _bars(state_axis, labels, state, colours, "MiB on the fullest device")
    state_axis.set_title("parameters + optimizer state per device", fontsize=10)
    _bars(traffic_axis, labels, traffic, colours, "MiB per device per step")
    traffic_axis.set_title(
        "what the fullest device sends and receives per step\n(counted: the layout's ring on "
        "JAX, TensorFlow's all_reduce, a pipeline's cuts)",
        fontsize=9,
    )
    return figure


def _bars(axis: Axes, labels: list[str], values: list[float], colours: list[str], unit: str):
    """One bar per value; a value that does not apply (NaN) gets no bar and "—" at the base."""
    positions = range(len(values))
    axis.bar(positions, [0.0 if math.isnan(v) else v for v in values], color=colours)
    for position, value in zip(positions, values, strict=True):
        shown = 0.0 if math.isnan(value) else value
        text = "—" if math.isnan(value) else f"{value:.2g}"
        axis.text(position, shown, text, ha="center", va="bottom", fontsize=7)
    axis.set_xticks(list(positions), labels, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel(unit)
    known = [v for v in values if not math.isnan(v)]
    axis.set_ylim(0, max(known, default=1.0) * 1.2 or 1.0)


def _model_axis(result: RunResult) -> int:
    if result.mesh and "x" in result.mesh:
        return int(result.mesh.split("x")[1])
    return result.devices


def _draw_kernel(axis: Axes, placement: dict, model_axis: int) -> None:
    shape = placement["shape"]
    rows, columns = _as_matrix(shape, placement["axes"])
    axes = placement["axes"]
    split = "model" in axes
    if not split:
        axis.add_patch(Rectangle((0, 0), columns, rows, color=REPLICATED))
    elif _splits_columns(axes):
        width = columns / model_axis
        for device in range(model_axis):
            colour = DEVICE_COLOURS[device % len(DEVICE_COLOURS)]
            axis.add_patch(Rectangle((device * width, 0), width, rows, color=colour, ec="white"))
    else:
        height = rows / model_axis
        for device in range(model_axis):
            colour = DEVICE_COLOURS[device % len(DEVICE_COLOURS)]
            top = rows - (device + 1) * height
            axis.add_patch(Rectangle((0, top), columns, height, color=colour, ec="white"))
    axis.set_xlim(0, columns)
    axis.set_ylim(0, rows)
    axis.set_aspect("auto")
    axis.set_xticks([])
    axis.set_yticks([])
    piece = "×".join(str(d) for d in placement.get("shard_shape") or shape)
    axis.set_title(
        f"{placement['variable']}\n{'×'.join(map(str, shape))}, each device {piece}", fontsize=8
    )
    axis.set_xlabel(ROLE_TEXT.get(placement["role"], placement["role"]), fontsize=8)


def _as_matrix(shape: Sequence[int], axes: Sequence[str]) -> tuple[int, int]:
    """Rows and columns of a kernel drawn flat: its first axis against the rest, or for an
    attention output projection (heads, head size, features) its heads against the features."""
    if len(shape) == 3 and axes and axes[0] == "model":
        return shape[0] * shape[1], shape[2]
    return shape[0], math.prod(shape[1:])


def _splits_columns(axes: Sequence[str]) -> bool:
    return axes[0] != "model"
