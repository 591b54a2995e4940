"""`Comparison`: the runs of one comparison, as a table, figures, advice and a report folder.

Everything here reads measured rows (and rows a cost model projected, labelled as such); nothing
here trains. `Experiment.compare` returns one; `Comparison(results)` rebuilds one from any rows,
such as those of `gpk.history()`'s run log, or merges the rows of several.

A projection counts each experiment's training step through the counter its Experiment or its
run log gave a comparison of its rows (`remember_counter`). A comparison rebuilt from rows finds
those counters by the rows' experiment ids, so a merged comparison projects as its parts do.
"""

from __future__ import annotations

import html
import inspect
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd

from .analysis.tables.advice import advice
from .analysis.tables.compact_view import compact_html
from .analysis.tables.comparison_table import comparison_table, format_table
from .analysis.tables.time_to_accuracy import convergence_summary
from .runs.results.run_result import RunResult

Counter = Callable[[str], dict[str, Any] | str]
# An experiment id -> a weak reference to the counter that counts its step: the Experiment's,
# or the run log's of a comparison rebuilt from it. Weak, so a forgotten Experiment and its data
# are freed; a comparison holds the counters of its own rows.
_COUNTERS: dict[str, Callable[[], Counter | None]] = {}


def remember_counter(experiment_ids: Iterable[str], counter: Counter) -> None:
    """Let comparisons rebuilt from these experiments' rows count their steps with `counter`.

    A counter already remembered for an experiment, and still alive, is kept: the Experiment
    that ran the rows counts first.

    Args:
        experiment_ids: the experiments `counter` counts.
        counter: an experiment id -> its counted step (the counting child's dict), or one
            sentence saying why there is none.
    """
    try:
        ref = weakref.WeakMethod(counter) if inspect.ismethod(counter) else weakref.ref(counter)
    except TypeError:  # a callable without weak references: its comparison holds it
        return
    for experiment_id in experiment_ids:
        known = _COUNTERS.get(experiment_id)
        if known is None or known() is None:
            _COUNTERS[experiment_id] = ref


def _known_counter(experiment_id: str) -> Counter | None:
    known = _COUNTERS.get(experiment_id)
    return None if known is None else known()


class Comparison:
    """The runs of one comparison: a table, plots and a report folder, all from measured rows."""

    def __init__(self, results: Sequence[RunResult], counter: Counter | None = None) -> None:
        self.results = list(results)
        # An experiment id -> its counted training step, for projections: the Experiment's
        # `counted_step`, or the run log's stored counts (`gpk.history_comparison()`); None for
        # rows handed in alone, which count with the counters remembered for their experiments.
        self.counter = counter
        ids = list(dict.fromkeys(r.experiment_id for r in self.results if not r.projected))
        if counter is not None:
            remember_counter(ids, counter)
        # Held here, so the counters outlive the comparisons these rows came from.
        self._counters = {eid: _counters_of(eid, counter) for eid in ids}

    @property
    def table(self) -> pd.DataFrame:
        """One row per run, measured or projected, with speedup and efficiency against its
        experiment's single-device run; figures in SI units (seconds, bytes)."""
        return comparison_table(self.results)

    def plot(self):
        """Wall-clock time, throughput and speedup (with the ideal line), side by side."""
        from .plots.comparison import comparison_figure

        return comparison_figure(self.table)

    def plot_communication(self):
        """Where each run's step goes (compute | exposed communication | idle), and the
        communication share against the device count."""
        from .plots.communication import communication_figure

        return communication_figure(self.table)

    def plot_predictions(self):
        """Each measured row's step against the step a calibration predicted for it
        (`compare(calibration=...)`), with the band within 0.7-1.4."""
        from .plots.predictions import prediction_figure

        return prediction_figure(self.table)

    def plot_layout(self, run_id: str | None = None):
        """How a tensor-parallel run placed each kernel: the shards per device, as the arrays
        hold them. `run_id` picks the run; by default the first finished tensor run."""
        from .plots.sharding import layout_figure

        tensor = [r for r in self.results if r.ok and r.extra.get("layout")]
        chosen = [r for r in tensor if run_id is None or r.run_id == run_id]
        if not chosen:
            from .errors import GpkError

            raise GpkError(
                f"no finished tensor-parallel run {run_id or ''} in this comparison; "
                "compare strategy 'tensor' with backend='jax'"
            )
        return layout_figure(chosen[0])

    def plot_sharding(self):
        """Memory against communication: parameters and optimizer state on the fullest device,
        beside the bytes the collectives move per device and step, one bar per run."""
        from .plots.sharding import sharding_cost_figure

        return sharding_cost_figure(self.results)

    def plot_memory(self, device: Any = None, budget: int | None = None):
        """Memory per device by part (parameters, gradients, optimizer state, activations), one
        stacked bar per run; `device` (a preset such as "h100") and `budget` (the runs'
        memory_budget, bytes) are drawn across."""
        from .analysis.cost_model.hardware_presets import device as preset
        from .plots.memory_parts import components_figure

        lines = [] if device is None else [(preset(device).memory_bytes, preset(device).name)]
        lines += [] if budget is None else [(float(budget), "memory budget")]
        return components_figure(self.results, lines)

    def plot_convergence(self, metrics: str | Sequence[str] | None = None):
        """Loss or metric against training time and against epochs, one line per run, with the
        target as a dashed line. `metrics` defaults to the target's metric (else the validation
        loss, else the training loss); several give one row of panels each."""
        from .plots.convergence import convergence_figure

        return convergence_figure(self.results, metrics)

    def plot_time_to_target(self):
        """Time to target per run ("not reached" drawn as an empty bar), and speedup measured in
        time to target beside speedup measured in samples per second."""
        from .plots.convergence import time_to_target_figure

        return time_to_target_figure(self.table)

    @property
    def convergence(self) -> str:
        """The learning-rate rule as applied and who reached the target when, in a sentence."""
        return convergence_summary(self.table)

    @property
    def advice(self) -> str:
        """Which strategy and device count to pick here, and why, in one sentence."""
        return advice(self.table)

    def project(
        self, preset: Any = "nvlink4", devices: Sequence[int] = (1, 2, 4, 8), **options: Any
    ) -> Comparison:
        """The measured rows plus rows a cost model projected onto GPUs the user does not have.

        Projected rows have `projected=True`, their own experiment id (`<id>:<preset>+<gpu>`) and
        a projected one-device baseline, so their speedups never mix with measured ones; they
        are not written to the run log. Compute is the training step counted by the compiler,
        on the GPU's roofline; a step that cannot be counted is projected on the measured step,
        and says so (`docs/projection.md`).

        Args:
            preset: an interconnect name (nvlink4, nvlink3, pcie5, pcie4, pcie3, net100g,
                net200g, net400g), a dict such as {"bandwidth_gb_s": 40, "latency_us": 4}, a
                `gpk.GPUCluster`: device counts that fit in one node then use its link inside,
                larger ones its network between, and its GPU is the device projected onto; or
                a `gpk.DeviceCalibration`: its measured link and rates.
            devices: the device counts to project onto.
            **options: `device` (a100, h100, h200; default: the link's usual GPU); `precision`
                (fp32, tf32, bf16, fp16; default bf16); `calibrate`, a dict
                {"throughput_samples_s": 2375, "device": "a100", "global_batch": 256} or a
                one-GPU run, replaces the band; `global_batch` projects at another batch;
                `compute="measured"` (or `compute_scale` / `measured_device`) keeps the measured
                step time. See `projected_rows.ProjectionOptions` for the others (overlap,
                schedule, ...).
        """
        from .analysis.cost_model.gpu_cluster import GPUCluster, project_onto_cluster
        from .analysis.cost_model.projected_rows import ProjectionOptions, project_results

        if hasattr(preset, "as_device"):  # a calibration: its devices, its link, its rates
            options.setdefault("device", preset)
            # Its rates are what the devices reached, not peaks: no share of them is lost.
            options.setdefault("efficiency", (1.0, 1.0, 1.0, f"measured: {preset.label}"))
        if "work" not in options and not _measured_asked(options):
            options["work"] = self.counted_work()
        asked = ProjectionOptions(**options)
        if isinstance(preset, GPUCluster):
            projected = project_onto_cluster(self.results, preset, list(devices), asked)
        else:
            projected = project_results(self.results, preset, list(devices), asked)
        return Comparison(self.results + projected, self.counter)

    def counted_work(self) -> dict[str, Any]:
        """Each projected experiment's counted step, or the sentence saying why it has none."""
        from .analysis.cost_model.counted_work import from_counts

        found: dict[str, Any] = {}
        for result in self.results:
            eid = result.experiment_id
            if result.projected or not result.ok or eid in found:
                continue
            counted = self._count(eid)
            found[eid] = from_counts(counted) if isinstance(counted, dict) else counted
        return found

    def _count(self, experiment_id: str) -> dict[str, Any] | str:
        """The experiment's counted step from the first of its counters that has one, else the
        first one's sentence."""
        sentences = []
        for counter in self._counters.get(experiment_id, ()):
            counted = counter(experiment_id)
            if isinstance(counted, dict):
                return counted
            sentences.append(counted)
        if sentences:
            return sentences[0]
        return (
            f"experiment {experiment_id} has no Experiment in this process to count its step "
            "(its rows were handed in alone; gpk.history_comparison() reads the run log's counts)"
        )

    def save_report(self, directory: str = "gpk_report") -> list:
        """Write the table (CSV, Markdown) and the plots (PNG) to `directory`."""
        from .report import write_report

        return write_report(self.table, directory, self.results)

    def __repr__(self) -> str:
        table = self.table
        notes = "\n".join(_notes(table))
        return f"{format_table(table)}\n\n{notes}".rstrip()

    def _repr_html_(self) -> str:
        table = self.table
        paragraphs = "".join(f"<p><b>{html.escape(s)}</b></p>" for s in _notes(table))
        return compact_html(table) + paragraphs


def projection_presets() -> dict[str, tuple[str, ...]]:
    """The names a projection takes: links, GPUs, precisions and compute sources (for help)."""
    from .analysis.cost_model import hardware_presets
    from .analysis.cost_model.projected_compute import COMPUTE_MODES

    return {
        "link": tuple(hardware_presets.INTERCONNECTS),
        "gpu": tuple(hardware_presets.DEVICES),
        "precision": hardware_presets.PRECISIONS,
        "compute": COMPUTE_MODES,
    }


def check_projection(
    preset: Any, device: Any = None, precision: str | None = None, compute: str | None = None
) -> None:
    """A projection's link, GPU, precision and compute source, checked before anything runs:
    an unknown one is one sentence naming the presets."""
    from .analysis.cost_model import hardware_presets
    from .analysis.cost_model.gpu_cluster import GPUCluster
    from .errors import GpkError

    if not isinstance(preset, GPUCluster):
        hardware_presets.interconnect(preset)
    if device is not None:
        hardware_presets.device(device)
    if precision is not None:
        hardware_presets.check_precision(precision)
    modes = projection_presets()["compute"]
    if compute is not None and compute not in modes:
        known = ", ".join(repr(m) for m in modes)
        raise GpkError(f"compute={compute!r} is not known; use one of {known}")


def _counters_of(experiment_id: str, given: Counter | None) -> tuple[Counter, ...]:
    """The counters an experiment's step is asked of, in turn: the one given, then the one
    remembered for the experiment."""
    known = _known_counter(experiment_id)
    return tuple(dict.fromkeys(c for c in (given, known) if c is not None))


def _measured_asked(options: dict[str, Any]) -> bool:
    return options.get("compute") == "measured" or any(
        options.get(key) is not None for key in ("compute_scale", "measured_device")
    )


def _notes(table: pd.DataFrame) -> list[str]:
    """The sentences shown under a comparison's table: the advice, then the convergence."""
    return [s for s in (advice(table), convergence_summary(table)) if s]
