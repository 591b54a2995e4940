"""The widget panel: pick devices and strategies, click Run or Compare, watch, read the tabs.

A click turns the controls into a plan (`Controls.plan`) and hands it to the API on a background
thread, so the kernel keeps answering while workers train: other cells run, widgets respond, and
Stop can set the `cancel` event the API watches (a run stops within a fraction of a second). The
thread only sets widget traits, which ipywidgets allows from any thread. Any error is one red
sentence in the panel, which stays usable.

>>> panel = Panel(Request(model="mlp"))  # doctest: +SKIP
>>> panel.compare_button.click(); panel.wait(); panel.comparison.table  # doctest: +SKIP
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Sequence

import ipywidgets as widgets
import pandas as pd
from IPython.display import display

from ..cluster.slurm.commands import Partition
from ..cluster.slurm.commands import partitions as slurm_partitions
from ..comparison import Comparison
from ..errors import one_sentence
from ..options.request import Request
from ..runs.description.device_choice import list_devices
from ..runs.description.run_spec import RunSpec
from ..runs.results.run_result import RunResult
from ..strategies import BACKENDS, runnable
from . import result_tabs
from .controls import Controls, PanelPlan
from .plan_tab import PlanTab
from .progress_rows import RunRow
from .strategy_options import panel_options
from .views import ShowOnce

ERROR_STYLE = "color:#c62828;font-weight:bold"
SECTIONS = ("compare strategies", "plan a cluster run")


class Panel(ShowOnce):
    """Devices, strategies, their options, batch size and epochs in; a table and plots out;
    and, in its second section, the plan search on a named cluster.

    `widget` is the whole panel (CSS class `gpk-panel`); `comparison` the last finished
    comparison; `plan("run" | "compare")` what a click would run; `plan_tab` the plan search
    (`plan_tab.plans` its last answer).
    """

    def __init__(
        self,
        request: Request,
        devices: pd.DataFrame | None = None,
        title: str = "",
        partitions: Sequence[Partition] | None = None,
    ) -> None:
        found = list_devices() if devices is None else devices
        offered = slurm_partitions() if partitions is None else partitions
        self.controls = Controls(request, found, offered)
        self.run_button = widgets.Button(description="Run", button_style="primary", icon="play")
        self.compare_button = widgets.Button(
            description="Compare", button_style="info", icon="bar-chart"
        )
        self.stop_button = widgets.Button(
            description="Stop", button_style="danger", icon="stop", disabled=True
        )
        self.status = widgets.HTML()
        self.runs = widgets.VBox()
        self.tabs, self.outputs = result_tabs.make_tabs()
        self.comparison: Comparison | None = None
        self._previous_rows: tuple[widgets.Widget, ...] = ()
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        buttons = widgets.HBox([self.run_button, self.compare_button, self.stop_button])
        header = widgets.HTML(f"<b>gpu_parallel_kit</b> · {html.escape(title)} · {_where(found)}")
        self.offers = widgets.HTML(offers_html())
        self.offers.add_class("gpk-offers")
        compare = widgets.VBox(
            [self.controls.widget, buttons, self.controls.hint, self.status, self.runs, self.tabs]
        )
        # The plan search on the same model, its plans run on the devices picked beside.
        self.plan_tab = PlanTab(
            self.controls.training_request, lambda: len(self.controls.devices.value)
        )
        self.sections = widgets.Tab(
            children=[compare, self.plan_tab.widget], titles=SECTIONS, selected_index=0
        )
        self.sections.add_class("gpk-sections")
        self.widget = widgets.VBox([header, self.offers, self.sections])
        self.widget.add_class("gpk-panel")
        self.run_button.on_click(lambda _: self.start("run"))
        self.compare_button.on_click(lambda _: self.start("compare"))
        self.stop_button.on_click(lambda _: self.stop())

    def _show(self) -> None:
        display(self.widget)

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def plan(self, action: str = "compare") -> PanelPlan:
        """What a click on Run or Compare would hand to the API, with the current values."""
        return self.controls.plan(action)

    def start(self, action: str) -> None:
        """Run or Compare: plan in this thread (mistakes show at once), train in another."""
        if self.busy:
            return
        try:
            plan = self.plan(action)
        except ValueError as error:  # GpkError included: an empty choice
            self._error(error)
            return
        self._cancel = threading.Event()
        self._set_busy(True)
        # The previous results stay in the tabs until this click has new ones: a bad value
        # found by the API (e.g. a batch that does not split over the devices) must not wipe them.
        self._previous_rows = self.runs.children
        self.runs.children = ()
        self.status.value = html.escape(plan.describe()) + "…"
        self._thread = threading.Thread(
            target=self._work, args=(plan,), name="gpk-panel", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Cancel the running comparison: the API kills the worker and keeps finished rows."""
        if self.busy:
            self._cancel.set()
            self.stop_button.disabled = True
            self.status.value = "Stopping…"

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the current click's work is done (for scripts and tests); True if so."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.busy

    def _work(self, plan: PanelPlan) -> None:
        started = time.perf_counter()
        try:
            comparison = plan.execute(self._row, self._cancel)
            stopped = self._cancel.is_set()
            if comparison.results:
                self.comparison = comparison
                result_tabs.fill(self.outputs, comparison)
                self.tabs.selected_index = 0
            self.status.value = html.escape(_summary(comparison.results, started, stopped))
        except Exception as error:  # noqa: BLE001 - every failure is one sentence in the panel
            if not self.runs.children:  # nothing ran: show the last results' rows again
                self.runs.children = self._previous_rows
            self._error(error)
        finally:
            self._set_busy(False)

    def _row(self, spec: RunSpec) -> RunRow:
        """The API's progress factory: one new row per run, fed that run's events."""
        return RunRow(spec, self.runs)

    def _set_busy(self, busy: bool) -> None:
        self.run_button.disabled = busy
        self.compare_button.disabled = busy
        self.stop_button.disabled = not busy

    def _error(self, error: BaseException) -> None:
        sentence = html.escape(one_sentence(error))
        self.status.value = f"<span class='gpk-error' style='{ERROR_STYLE}'>{sentence}</span>"


def offers_html() -> str:
    """What the panel offers, from the registry and the tabs, so the words never fall behind the
    boxes: each strategy with its one-line summary and the backends it runs on, the backend
    choice, the result tabs, the strategies' options and the plan section. Folded: it is read
    once, then out of the way."""
    options = ", ".join(o.name.replace("_", " ") for o in panel_options())
    strategies = "".join(
        f"<li><code>{record.name}</code>: {html.escape(record.summary)} "
        f"<i>({', '.join(b for b in BACKENDS if b not in record.missing)})</i></li>"
        for record in runnable()
    )
    return (
        "<details><summary>What the panel offers</summary><ul>"
        f"{strategies}"
        "<li><b>backend</b>: TensorFlow (tf.distribute), JAX (Keras's keras.distribution), or "
        "both in one table; a strategy a backend lacks is left out with one sentence</li>"
        f"<li><b>tabs</b>: {', '.join(result_tabs.TABS)}</li>"
        f"<li><b>options</b>, shown while a ticked strategy takes them: {options}</li>"
        f"<li><b>{SECTIONS[1]}</b>: the plan search on a named cluster, its explanation and "
        "plot; a plan run here from its row, the top 3 compared here; a calibration of the "
        "devices here</li>"
        "</ul></details>"
    )


def _where(devices: pd.DataFrame) -> str:
    """The header's device note: real GPUs, or virtual devices (which cannot show real speed)."""
    if devices.empty:
        return "no device found"
    if bool(devices["virtual"].all()):
        return (
            f"{len(devices)} virtual {devices['kind'].iloc[0]} devices "
            "(they share this machine's cores: shapes and costs, not real speedups)"
        )
    return f"{len(devices)} {devices['kind'].iloc[0].upper()}(s)"


def _summary(results: list[RunResult], started: float, stopped: bool = False) -> str:
    elapsed = time.perf_counter() - started
    counts: dict[str, int] = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    statuses = ", ".join(f"{n} {status}" for status, n in counts.items())
    if stopped and not counts.get("cancelled"):  # Run's runs: the stopped one is in the log
        return f"Stopped after {elapsed:.0f} s: {len(results)} run(s) finished ({statuses})."
    if counts.get("cancelled"):
        finished = len(results) - counts["cancelled"]
        return (
            f"Stopped after {elapsed:.0f} s: {finished} of {len(results)} runs finished "
            f"({statuses}); the table keeps them."
        )
    return f"Done in {elapsed:.0f} s: {len(results)} run(s), {statuses}."
