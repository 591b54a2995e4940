"""What a figure draws, as plain values: each panel's title, axis labels and bars.

A figure's PNG carries this as a text chunk (`FIGURE_KEY`), invisible where it is shown, so a
saved or executed notebook can be checked against its own tables from the figure's values rather
than its pixels (`read_png_data`).
"""

from __future__ import annotations

import io
import json
from typing import Any

from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

FIGURE_KEY = "gpk-figure"


def figure_data(figure: Figure) -> dict[str, Any]:
    """Every panel of `figure`: its title, labels, y scale and bars (tick label, value)."""
    return {"axes": [_axes_data(axis) for axis in figure.axes if axis.get_visible()]}


def _axes_data(axis: Axes) -> dict[str, Any]:
    ticks = {
        round(float(x), 6): t.get_text()
        for x, t in zip(axis.get_xticks(), axis.get_xticklabels(), strict=False)
    }
    bars = []
    for container in axis.containers:
        if not isinstance(container, BarContainer):
            continue
        for patch in container.patches:
            x = round(patch.get_x() + patch.get_width() / 2, 6)
            bars.append(
                {
                    "label": _one_line(ticks.get(x, "")),
                    "series": container.get_label()
                    if not container.get_label().startswith("_")
                    else "",
                    "bottom": float(patch.get_y()),
                    "value": float(patch.get_height()),
                }
            )
    return {
        "title": axis.get_title(),
        "xlabel": axis.get_xlabel(),
        "ylabel": axis.get_ylabel(),
        "yscale": axis.get_yscale(),
        "bars": bars,
    }


def _one_line(label: str) -> str:
    """A tick label as one line: "data\n×2" (stacked to fit its slot) -> "data×2"."""
    return " ".join(label.split()).replace(" ×", "×")


def png_metadata(figure: Figure) -> dict[str, str]:
    """The text chunk to save with the figure's PNG."""
    return {FIGURE_KEY: json.dumps(figure_data(figure))}


def read_png_data(png: bytes) -> dict[str, Any] | None:
    """The figure data a PNG carries, or None for a PNG drawn elsewhere."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        text = getattr(image, "text", {}).get(FIGURE_KEY)
    return json.loads(text) if text else None
