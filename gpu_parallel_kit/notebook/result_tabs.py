"""The panel's result tabs: table, wall-clock, speedup, pipeline timeline, memory per device.

Filled from the panel's background thread, so content goes in through the Output widget's
`append_display_data`/`append_stdout` (and a reset of its `outputs`), never its context manager,
which captures whatever the kernel's main thread prints at the same time.
"""

from __future__ import annotations

from collections.abc import Mapping

import ipywidgets as widgets
from IPython.display import HTML

from ..api import Comparison
from ..plots import speedup_figure, wall_time_figure
from .memory_plot import memory_figure
from .views import summary_html

TABS = ("table", "wall-clock", "speedup", "pipeline timeline", "memory")


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
    outputs["wall-clock"].append_display_data(wall_time_figure(table))
    outputs["speedup"].append_display_data(speedup_figure(table))
    pipelines = [r for r in comparison.results if r.ok and r.extra.get("planned_timeline")]
    for result in pipelines:
        outputs["pipeline timeline"].append_display_data(result.plot_timeline())
    if not pipelines:
        outputs["pipeline timeline"].append_stdout(
            "No finished model-parallel run here: tick model and run again to see its pipeline.\n"
        )
    outputs["memory"].append_display_data(memory_figure(comparison.results))
