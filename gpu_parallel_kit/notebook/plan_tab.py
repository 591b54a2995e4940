"""The panel's plan tab: search the panel's model's plans on a named cluster, then run one here.

Its inputs are `%gpk search`'s options (the GPU, a preset or a kept calibration; nodes, GPUs per
node, the links, the global batch, the precision and the software stack), read into the same
parsed options the magic reads (`options.search.defaults` and `keywords`), and the search is
`Experiment.search` on the panel's model and one sample of its data. It shows the ranked table
with the best plan's explanation, and the plot; each leading plan has a "run here" button
(`Experiment.run_plan` on the panel's picked devices) and "compare the top 3 here" runs
`Experiment.compare_plans`. "Calibrate these devices" measures the picked devices
(`gpk.calibrate`, as `%gpk calibrate` does), shows its table and curves, and offers the
calibration as the GPU. The work goes on a background thread; Stop cancels a run, and ends a
search's count (its child process stopped; the next search counts again).
"""

from __future__ import annotations

import html
import io
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pandas as pd
from IPython.display import HTML, Image

from ..api import calibrate
from ..comparison import Comparison
from ..errors import GpkError, one_sentence
from ..options.request import Request
from ..options.search import (
    GPU_PRESETS,
    LINKS,
    PRECISION_NAMES,
    SEARCH,
    defaults,
    keywords,
)
from ..planning.calibration_probe import DEFAULT_BUDGET_S, calibration_folder
from ..planning.step_count import SearchCancelled
from ..runs.description.run_spec import RunSpec
from ..strategies.plan_axes import PLAN_AXES, SCALED
from .progress_rows import RunRow

ERROR_STYLE = "color:#c62828;font-weight:bold"
COMPARED = 3  # the leading plans "compare the top 3 here" runs
OFFERED = 5  # the leading plans with a "run here" button each
USUAL_LINK = "the GPU's usual"  # the inside link's entry for GPUCluster's default
# The stack's entry for GPUCluster's default: the newest held, or a calibration's own.
NEWEST_STACK = "the newest"
# The columns of a plan run's table worth reading beside the plan: the shape that ran.
RAN_COLUMNS = (
    "strategy", "devices", *reversed(PLAN_AXES), "schedule", "micro_batches", "status",
    "step_time_s", SCALED,
)  # fmt: skip


@dataclass(frozen=True)
class GpuChoice:
    """One entry of the GPU list: a preset by name, or a calibration kept in its file."""

    label: str
    device: str  # `--device`'s text: a preset's name or the calibration's .json path


def gpu_choices(folder: Path | None = None) -> list[GpuChoice]:
    """The presets, then every calibration kept in the cache folder, newest first."""
    kept = sorted((folder or calibration_folder()).glob("*.json"), reverse=True)
    return [GpuChoice(name, name) for name in GPU_PRESETS] + [
        GpuChoice(f"calibration {path.stem}", str(path)) for path in kept
    ]


def plan_label(rank: int, row: pd.Series) -> str:
    """A leading plan in a few words: "#1 data 4 × tensor 8 × stages 1, zero-1 · 0.81 s"."""
    step = row["step_time_s"]
    return (
        f"#{rank} data {row['data']} × tensor {row['tensor']} × stages {row['stages']}, "
        f"{row['sharding']} · {step:.3g} s a step"
    )


class PlanTab:
    """The plan search's inputs, its answer, and a plan run here from its row.

    Args:
        request: the panel's request as it stands (model, data, batch and backend), asked at
            each click.
        devices_here: how many of this machine's devices a plan run may take (the panel's
            picked devices), asked at each click.
    """

    def __init__(
        self,
        request: Callable[[], Request],
        devices_here: Callable[[], int],
        global_batch: int = 512,
    ) -> None:
        self._request, self._devices_here = request, devices_here
        wide = widgets.Layout(width="22em")
        style = {"description_width": "8em"}
        choices = gpu_choices()
        self.gpu = widgets.Dropdown(
            options=[(c.label, c.device) for c in choices],
            value="h100",
            description="GPU",
            layout=wide,
            style=style,
        )
        self.nodes = widgets.IntText(value=1, description="nodes", layout=wide, style=style)
        self.per_node = widgets.IntText(
            value=8, description="GPUs per node", layout=wide, style=style
        )
        self.inside = widgets.Dropdown(
            options=[(USUAL_LINK, USUAL_LINK)] + [(name, name) for name in LINKS],
            value=USUAL_LINK,
            description="link inside",
            layout=wide,
            style=style,
        )
        self.between = widgets.Dropdown(
            options=LINKS, value="net400g", description="between nodes", layout=wide, style=style
        )
        stacks = next(flag.choices for flag in SEARCH if flag.name == "stack")
        self.stack = widgets.Dropdown(
            options=[(NEWEST_STACK, NEWEST_STACK)] + [(name, name) for name in stacks],
            value=NEWEST_STACK,
            description="stack",
            layout=wide,
            style=style,
        )
        self.stack.tooltip = (
            "the training software the plans' steps are timed under; by default the newest the "
            "kit holds, or a calibration's own"
        )
        self.global_batch = widgets.IntText(
            value=global_batch, description="global batch", layout=wide, style=style
        )
        self.precision = widgets.Dropdown(
            options=PRECISION_NAMES, value="bf16", description="precision", layout=wide, style=style
        )
        self.budget = widgets.BoundedIntText(
            value=int(DEFAULT_BUDGET_S),
            min=10,
            max=3600,
            description="probe (s)",
            layout=widgets.Layout(width="14em"),
            style=style,
        )
        self.budget.tooltip = "seconds the calibration's probe of the picked devices may take"
        self.calibrate_button = widgets.Button(
            description="Calibrate these devices",
            icon="tachometer",
            layout=widgets.Layout(width="auto"),
        )
        self.calibrate_button.tooltip = (
            "measure the devices picked beside for the cost model (gpk.calibrate); the "
            "calibration is kept and offered as the GPU"
        )
        self.calibrated = widgets.Output()
        self.calibrated.add_class("gpk-calibration")
        self.calibration: Any = None  # the last calibration made here
        self.search_button = widgets.Button(
            description="Search plans", button_style="primary", icon="search"
        )
        self.stop_button = widgets.Button(
            description="Stop", button_style="danger", icon="stop", disabled=True
        )
        self.compare_button = widgets.Button(
            description=f"compare the top {COMPARED} here",
            button_style="info",
            icon="bar-chart",
            disabled=True,
            layout=widgets.Layout(width="auto"),
        )
        self.status = widgets.HTML()
        self.table = widgets.Output()
        self.table.add_class("gpk-plan-table")
        self.figure = widgets.Output()
        self.figure.add_class("gpk-plan-figure")
        self.rows = widgets.VBox()
        self.rows.add_class("gpk-plan-rows")
        self.runs = widgets.VBox()
        self.ran = widgets.Output()
        self.ran.add_class("gpk-plan-ran")
        self.plans: Any = None  # the last search's `Plans`
        self.comparison: Comparison | None = None  # the last plan run's rows
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        inputs = widgets.HBox(
            [
                widgets.VBox([self.gpu, self.nodes, self.per_node, self.global_batch]),
                widgets.VBox([self.inside, self.between, self.precision, self.stack]),
            ],
            layout=widgets.Layout(flex_flow="row wrap"),
        )
        buttons = widgets.HBox(
            [self.search_button, self.stop_button, self.calibrate_button, self.budget]
        )
        self.widget = widgets.VBox(
            [inputs, buttons, self.status, self.calibrated, self.table, self.figure, self.rows]
            + [self.compare_button, self.runs, self.ran]
        )
        self.widget.add_class("gpk-plan-tab")
        self.search_button.on_click(lambda _: self.search())
        self.compare_button.on_click(lambda _: self.start(self._compare_top, "Comparing"))
        self.calibrate_button.on_click(lambda _: self.start(self._calibrate, "Calibrating"))
        self.stop_button.on_click(lambda _: self.stop())

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def search_options(self) -> dict[str, Any]:
        """`Experiment.search`'s keywords, as `%gpk search` reads them from its flags; a bad
        value (a node count of 0, a global batch of 0) is one sentence."""
        counts = {"nodes": self.nodes, "per_node": self.per_node, "global_batch": self.global_batch}
        for name, box in counts.items():
            if box.value < 1:
                raise GpkError(f"{name}={box.value} is too few; set {box.description} to 1 or more")
        parsed = defaults(
            device=self.gpu.value,
            nodes=self.nodes.value,
            per_node=self.per_node.value,
            inside=None if self.inside.value == USUAL_LINK else self.inside.value,
            stack=None if self.stack.value == NEWEST_STACK else self.stack.value,
            between=self.between.value,
            global_batch=self.global_batch.value,
            precision=self.precision.value,
        )
        return keywords(parsed)

    def search(self) -> None:
        """What Search plans does: the inputs checked here (a mistake is one sentence at once,
        nothing counted), the count and the ranking on another thread."""
        if self.busy:
            return
        try:
            options = self.search_options()
        except ValueError as error:  # GpkError included
            self._error(error)
            return
        self.start(lambda: self._search(options), "Searching")

    def start(self, work: Callable[[], None], verb: str) -> None:
        """Check in this thread (a mistake shows at once), then work in another."""
        if self.busy:
            return
        self._cancel = threading.Event()
        self._set_busy(True)
        self.status.value = f"{verb}…"
        self._thread = threading.Thread(
            target=self._guarded, args=(work,), name="gpk-plan", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Cancel the search or plan run going on: a search's count is ended, a run stopped."""
        if self.busy:
            self._cancel.set()
            self.stop_button.disabled = True
            self.status.value = "Stopping…"

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the current click's work is done (for scripts and tests); True if so."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.busy

    def run_row(self, rank: int) -> None:
        """Run the leading plan `rank` (from 1) here, as its "run here" button does."""
        self.start(lambda: self._run_plan(rank), f"Running plan #{rank} here")

    def _guarded(self, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as error:  # noqa: BLE001 - every failure is one sentence in the tab
            self._error(error)
        finally:
            self._set_busy(False)

    def _search(self, options: dict[str, Any]) -> None:
        started = time.perf_counter()
        experiment = self._request().experiment(progress=False)
        done = threading.Event()
        ticking = threading.Thread(target=self._tick, args=(started, done), daemon=True)
        ticking.start()
        try:
            plans = experiment.search(
                options.pop("gpus"),
                options.pop("global_batch"),
                progress=False,
                cancel=self._cancel,
                **options,
            )
        except SearchCancelled:
            self.status.value = "Stopped: the count was ended; the next search counts again."
            return
        finally:
            done.set()
            ticking.join()
        if self._cancel.is_set():  # stopped after the count, while the plans were ranked
            self.status.value = "Stopped: the count is kept for the next search."
            return
        self.plans = plans
        self.table.outputs = ()
        self.table.append_display_data(HTML(plans._repr_html_()))
        self.figure.outputs = ()
        self.figure.append_display_data(_image(plans.plot()))
        self._offer_rows(plans.top(OFFERED))
        fit = int(plans.table["fits"].sum())
        self.status.value = html.escape(
            f"Searched in {time.perf_counter() - started:.0f} s: {fit} of {len(plans.table)} "
            f"plans fit on {plans.cluster.label}."
        )

    def _tick(self, started: float, done: threading.Event) -> None:
        """The search's progress in the status line: the count runs in a child whose own bar
        would print into whichever cell the kernel runs now."""
        while not done.wait(1.0) and not self._cancel.is_set():
            self.status.value = (
                "Counting one step of the model (once: kept for later searches), then ranking "
                f"every plan… {time.perf_counter() - started:.0f} s"
            )

    def _calibrate(self) -> None:
        """`gpk.calibrate` on the devices picked beside, on the panel's first backend; its table
        and curves shown, and the calibration offered (and chosen) as the GPU."""
        request = self._request()
        backend = request.experiment(progress=False).backend
        started = time.perf_counter()
        calibration = calibrate(
            devices=self._devices_here(),
            backend=backend,
            budget_s=float(self.budget.value),
            progress=False,
        )
        self.calibration = calibration
        self.calibrated.outputs = ()
        self.calibrated.append_display_data(HTML(calibration.summary().to_html(border=0)))
        self.calibrated.append_display_data(_image(calibration.plot()))
        self.gpu.options = [(c.label, c.device) for c in gpu_choices()]
        if calibration.path:
            self.gpu.value = calibration.path
        self.status.value = html.escape(
            f"Calibrated {calibration.devices} {calibration.device_kind} device(s) on {backend} "
            f"in {time.perf_counter() - started:.0f} s; the GPU list now offers it."
        )

    def _offer_rows(self, top: pd.DataFrame) -> None:
        rows = []
        for rank, (_, row) in enumerate(top.iterrows(), start=1):
            button = widgets.Button(
                description="run here", icon="play", layout=widgets.Layout(width="auto")
            )
            button.add_class("gpk-run-here")
            button.on_click(lambda _, rank=rank: self.run_row(rank))
            label = widgets.HTML(f"<code>{html.escape(plan_label(rank, row))}</code>")
            rows.append(widgets.HBox([button, label]))
        self.rows.children = tuple(rows)
        self._set_busy(self.busy)

    def _run_plan(self, rank: int) -> None:
        plan = self._leading().iloc[rank - 1]
        comparison = self._experiment().run_plan(
            plan, devices=self._devices_here(), cancel=self._cancel
        )
        self._show_ran(comparison, f"plan #{rank}")

    def _compare_top(self) -> None:
        comparison = self._experiment().compare_plans(
            self._leading().head(COMPARED), devices=self._devices_here(), cancel=self._cancel
        )
        self._show_ran(comparison, f"the top {COMPARED} plans")

    def _leading(self) -> pd.DataFrame:
        if self.plans is None:
            raise GpkError("no plans yet; click Search plans first")
        return self.plans.top(OFFERED)

    def _experiment(self) -> Any:
        self.runs.children = ()
        return self._request().experiment(progress=self._row)

    def _row(self, spec: RunSpec) -> RunRow:
        return RunRow(spec, self.runs)

    def _show_ran(self, comparison: Comparison, what: str) -> None:
        self.comparison = comparison
        table = comparison.table
        shown = table[[c for c in RAN_COLUMNS if c in table.columns]].copy()
        if "step_time_s" in shown:
            shown["step_time_s"] = (shown["step_time_s"] * 1e3).round(2)
            shown = shown.rename(columns={"step_time_s": "step (ms)"})
        self.ran.outputs = ()
        self.ran.append_display_data(
            HTML(shown.to_html(index=False, border=0, classes="gpk-table", na_rep=""))
        )
        # A failed run's whole sentence, under the table it would widen.
        reasons = [
            f"<p class='gpk-reason'><b>{html.escape(r.strategy)}×{r.devices} {r.status}</b>: "
            f"{html.escape(r.reason)}</p>"
            for r in comparison.results
            if r.status != "ok" and r.reason
        ]
        if reasons:
            self.ran.append_display_data(HTML("".join(reasons)))
        statuses = ", ".join(f"{n} {s}" for s, n in table["status"].value_counts().items())
        verb = "Stopped" if self._cancel.is_set() else "Ran"
        self.status.value = html.escape(f"{verb} {what} here: {statuses}.")

    def _set_busy(self, busy: bool) -> None:
        self.search_button.disabled = busy
        self.calibrate_button.disabled = busy
        self.stop_button.disabled = not busy
        self.compare_button.disabled = busy or not self.rows.children
        for row in self.rows.children:
            row.children[0].disabled = busy

    def _error(self, error: BaseException) -> None:
        sentence = html.escape(one_sentence(error))
        self.status.value = f"<span class='gpk-error' style='{ERROR_STYLE}'>{sentence}</span>"


def _image(figure: Any) -> Image:
    """A figure as base64 PNG text, which an Output widget's JSON state can carry."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return Image(data=buffer.getvalue(), format="png")
