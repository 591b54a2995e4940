"""A calibration's measured curves: matrix products, elementwise work and each collective, one
panel each, a line per count of devices busy at once, and a named GPU's roofline beside them.

Draws plain data (`DeviceCalibration.curves()`), importing nothing of the kit but
`plots/style.py`, so the record in the cost model can draw itself without a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .style import DisplayFigure, plain_log_ticks

UNITS = {"matmul": ("FLOPs per product", "FLOP/s per device")}
BYTES = ("bytes per device", "bytes/s per device")


def calibration_figure(
    curves: Mapping[str, Mapping[int, Sequence[tuple[float, float]]]],
    label: str,
    roof: tuple[str, float, float] | None = None,
) -> DisplayFigure:
    """One panel per measured curve (log-log); `roof` (name, FLOP/s, bytes/s) draws a GPU's
    peak rates as dashed lines in the matmul and elementwise panels."""
    kinds = list(curves)
    columns = min(4, len(kinds)) or 1
    rows = -(-len(kinds) // columns) or 1
    figure = DisplayFigure(figsize=(11, 2.6 * rows + 0.6), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, kind in zip(axes, kinds, strict=False):
        xlabel, ylabel = UNITS.get(kind, BYTES)
        for busy, points in sorted(curves[kind].items()):
            if points:
                xs, ys = zip(*sorted(points), strict=True)
                ax.plot(xs, ys, marker="o", markersize=3, label=f"{busy} busy")
        if roof is not None and kind in ("matmul", "elementwise"):
            name, flops, bandwidth = roof
            ax.axhline(flops if kind == "matmul" else bandwidth, ls="--", color="0.4")
            ax.annotate(f"{name} peak", (0.02, 0.9), xycoords="axes fraction", fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_log_ticks(ax, plain=False)  # bytes and FLOPs span decades: powers of ten
        ax.set_title(kind.replace("_", "-"), fontsize=10)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(which="both", labelsize=7)
        ax.legend(fontsize=7)
    for ax in axes[len(kinds) :]:
        ax.set_visible(False)
    figure.suptitle(f"Measured rates, {label}", fontsize=11)
    return figure
