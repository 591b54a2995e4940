"""The panel's result tabs: table (with the advice), training time, speedup, communication,
pipeline timeline, memory per device.

Filled from the panel's background thread, so content goes in through the Output widget's
`append_display_data`/`append_stdout` (and a reset of its `outputs`), never its context manager,
which captures whatever the kernel's main thread prints at the same time. Figures go in as
`IPython.display.Image`: a figure's own PNG is raw bytes, which the widget's JSON state cannot
carry (the browser would get `data:image/png;base64,[object Object]`); an Image holds base64
text, as a kernel's own display message would.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape

import ipywidgets as widgets
from IPython.display import HTML, Image
from matplotlib.figure import Figure

from ..comparison import Comparison
from ..plots.communication import communication_figure
from ..plots.comparison import speedup_figure, wall_time_figure
from ..plots.state_and_peak_memory import memory_figure
from .views import summary_html

TABS = ("table", "training time", "speedup", "communication", "pipeline timeline", "memory")


def make_tabs() -> tuple[widgets.Tab, dict[str, widgets.Output]]:
    """An empty Tab with one Output per view, in `TABS` order."""
    outputs = {name: widgets.Output() for name in TABS}
    for name, output in outputs.items():
        output.add_class(f"gpk-tab-{name.replace(' ', '-')}")
    tabs = widgets.Tab(children=list(outputs.values()), titles=TABS)
    return tabs, outputs


def clear(outputs: Mapping[str, widgets.Output]) -> None:
    for output in outputs.values():
        output.outputs = ()


def fill(outputs: Mapping[str, widgets.Output], comparison: Comparison) -> None:
    """Every view of one comparison; a view with nothing to show says why in one line."""
    clear(outputs)
    table = comparison.table
    outputs["table"].append_display_data(HTML(summary_html(table)))
    if comparison.advice:
        outputs["table"].append_display_data(HTML(f"<p><b>{escape(comparison.advice)}</b></p>"))
    # The table's steady-state training time, compilation left out, as the table's steps tell it.
    _append_figure(outputs["training time"], wall_time_figure(table), "training time per run")
    _append_figure(outputs["speedup"], speedup_figure(table), "speedup against devices")
    _append_figure(outputs["communication"], communication_figure(table), "where each step goes")
    pipelines = [r for r in comparison.results if r.ok and r.extra.get("planned_timeline")]
    pipelines.sort(key=lambda r: -r.devices)  # the widest pipeline first: one stage shows no bubble
    for result in pipelines:
        _append_figure(outputs["pipeline timeline"], result.plot_timeline(), "pipeline timeline")
    if not pipelines:
        outputs["pipeline timeline"].append_stdout(
            "No finished pipeline run here: tick pipeline and run again to see its timeline.\n"
        )
    _append_figure(outputs["memory"], memory_figure(comparison.results), "memory per device")


def _append_figure(output: widgets.Output, figure: Figure, alt: str) -> None:
    output.append_display_data(Image(data=figure._repr_png_(), format="png", alt=alt))
