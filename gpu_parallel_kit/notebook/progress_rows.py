"""A progress bar per run in the panel, fed by the worker's events through the API's hook.

`Experiment(progress=factory)` calls the factory with each run's RunSpec and sends that run's
events to what it returns, so the panel sees phases, steps and step times exactly as the command
line's bars do, without touching the runner. The events arrive on the panel's background thread;
ipywidgets lets that thread set traits.
"""

from __future__ import annotations

import html
import time
from typing import Any

import ipywidgets as widgets

from ..runs.description.run_spec import RunSpec
from ..runs.processes.progress_bars import ending, startup_from, startup_text
from ..runs.results.run_result import RunResult
from ..strategies import strategy_record

_STYLE = {"ok": "success", "cancelled": "warning"}  # every other status is an error: "danger"


def run_label(spec: RunSpec) -> str:
    """ "data×2 (virtual)": the same words as the table and the plots."""
    label = strategy_record(spec.strategy).label(spec)
    return label + (" (virtual)" if spec.devices.virtual else "")


class RunRow:
    """One run's row: its label, a bar of training steps, and the start-up phase or the live step
    time. Start-up is a phase, not steps; a failed run's reason is written whole on a line under
    the row, never cut on it."""

    def __init__(self, spec: RunSpec, container: widgets.Box) -> None:
        self.label = widgets.Label(run_label(spec), layout=widgets.Layout(width="15em"))
        self.bar = widgets.IntProgress(value=0, min=0, max=1, layout=widgets.Layout(width="12em"))
        self.text = widgets.Label("starting the worker")
        # Last in a wrapping row at full width: it goes on a line of its own, under the bar.
        self.reason = widgets.HTML(
            layout=widgets.Layout(display="none", width="100%", margin="0 0 0 15em")
        )
        self.reason.add_class("gpk-run-reason")
        self.started = time.perf_counter()
        self.startup_s: float | None = None
        self.beside = ""  # what its start-up was spent beside
        self.row = widgets.HBox(
            [self.label, self.bar, self.text, self.reason],
            layout=widgets.Layout(flex_flow="row wrap"),
        )
        self.row.add_class("gpk-run")
        container.children = (*container.children, self.row)

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "phase":
            if event.get("total"):
                self.bar.max = int(event["total"])
            if event["phase"] == "training":
                self.startup_s, self.beside = startup_from(event, self.started)
                took = startup_text(self.startup_s, self.beside).removeprefix(" · ")
                self.text.value = f"training ({took})"
            else:
                self.text.value = str(event["phase"])  # a start-up phase, not steps
        elif kind == "progress":
            total = int(event.get("total") or self.bar.max)
            self.bar.max = max(total, 1)
            self.bar.value = min(int(event["step"]), self.bar.max)
            step_ms = float(event["step_time_s"]) * 1000
            self.text.value = f"step {event['step']}/{total} · {step_ms:.1f} ms per step"

    def close(self, result: RunResult) -> None:
        """The run's outcome on its row: green and the median step, or the status, and why on the
        line under it."""
        self.bar.bar_style = _STYLE.get(result.status, "danger")
        self.text.value = ending(result, self.startup_s, self.beside)
        if result.ok:
            self.bar.value = self.bar.max
            return
        if result.reason:
            self.reason.value = f"<small>{html.escape(result.reason)}</small>"
            self.reason.layout.display = None
