"""A progress row per configuration in the panel, fed by the worker's events through the API's hook.

`Experiment(progress=factory)` calls the factory with a run's RunSpec, or with each configuration's
in a comparison, and sends the events of its runs (every round of the configuration) to what it
returns, so the panel sees phases, steps and step times exactly as the command line's lines do,
without touching the runner; after each round the row is told what the rounds measured so far
(`RunRow.measured`). The events arrive on the panel's background thread; ipywidgets lets that
thread set traits.
"""

from __future__ import annotations

import html
import time
from typing import Any

import ipywidgets as widgets

from ..runs.description.run_spec import RunSpec
from ..runs.processes.configuration_lines import RoundsSoFar, measured_text
from ..runs.processes.progress_bars import ending, startup_from, startup_text
from ..runs.results.run_result import RunResult
from ..strategies import strategy_record

_STYLE = {"ok": "success", "cancelled": "warning"}  # every other status is an error: "danger"


def run_label(spec: RunSpec) -> str:
    """ "data×2 (virtual)": the same words as the table and the plots."""
    label = strategy_record(spec.strategy).label(spec)
    return label + (" (virtual)" if spec.devices.virtual else "")


class RunRow:
    """One run's row, or one configuration's over its rounds: its label, a bar of the round's
    training steps, and the start-up phase or the live step time; between rounds, the rounds
    measured, their median step and its interval. Start-up is a phase, not steps; a failed run's
    reason is written whole on a line under the row, never cut on it."""

    def __init__(self, spec: RunSpec, container: widgets.Box) -> None:
        # At least 15em, so the bars line up; a longer label ("expert×4 dispatched c=1.25
        # (virtual)") widens its own row rather than being cut.
        self.label = widgets.Label(
            run_label(spec), layout=widgets.Layout(min_width="15em", width="auto")
        )
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
        self.round = 0  # the configuration's round in hand, from 1; 0 outside a comparison
        self.failure = ""  # the status of the configuration's first failed round
        self.row = widgets.HBox(
            [self.label, self.bar, self.text, self.reason],
            layout=widgets.Layout(flex_flow="row wrap"),
        )
        self.row.add_class("gpk-run")
        container.children = (*container.children, self.row)

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "round":  # a comparison's next round of this configuration begins
            self.round = int(event["round"])
            self.started = time.perf_counter()
            if not self.failure:
                self.bar.bar_style = ""
            self.bar.value = 0
            self.text.value = f"round {self.round} · starting the worker"
        elif kind == "phase":
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
            steps = f"step {event['step']}/{total} · {step_ms:.1f} ms per step"
            self.text.value = f"round {self.round} · {steps}" if self.round > 1 else steps

    def close(self, result: RunResult) -> None:
        """The run's outcome on its row: green and the median step, or the status, and why on the
        line under it. A configuration's first failed round keeps its colour, status and
        sentence on the row through its later rounds."""
        if self.failure:
            self.text.value = self.failure
            return
        self.bar.bar_style = _STYLE.get(result.status, "danger")
        self.text.value = ending(result, self.startup_s, self.beside)
        if result.ok:
            self.bar.value = self.bar.max
            return
        self.failure = result.status
        if result.reason:
            self.reason.value = f"<small>{html.escape(result.reason)}</small>"
            self.reason.layout.display = None

    def measured(self, so_far: RoundsSoFar) -> None:
        """A comparison's round ended: the rounds measured so far, and what ended the measuring
        once it has ended."""
        if self.failure:
            return  # the failed round's status and sentence stay
        if so_far.ended:
            self.text.value = f"ok · {measured_text(so_far)} · {so_far.ended}"
        else:
            self.text.value = f"{measured_text(so_far)} · measuring"
            self.bar.bar_style = ""
