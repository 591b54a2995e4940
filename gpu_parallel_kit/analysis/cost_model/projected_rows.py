"""Projected rows: measured runs carried onto hardware the user does not have, labelled as such.

`project_results` reduces an experiment's measured single-device run to a
`step_time_model.Workload`, takes the stage split and the bytes across each cut from its measured
pipeline runs, and returns one `RunResult` per strategy and device count with `projected=True`.
Each row belongs to its own experiment (`<experiment_id>:<label>`, with a projected single-device
row of its own, so projected speedups never mix with measured ones), says what it assumed
(`reason`, `extra["assumptions"]`) and is one modelled step: no wall time, spread or step times.
Nothing here imports TensorFlow.

The assumptions made unless the runs or the caller say better: `docs/projection.md`, "Projection".
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ...backends import of_row
from ...errors import GpkError, whole_number
from ...pipeline.schedules import default_schedule, schedule_record
from ...runs.results.run_result import RunResult
from ...strategies import (
    DATA_PIPELINE,
    REGISTERED,
    canonical,
    has,
    lookup,
    projectable_names,
    resolve,
)
from . import hardware_presets
from .hardware_presets import Device, Interconnect
from .measured_inputs import (
    NotedFigure,
    NotedPartition,
    backward_ratio,
    measured_partition,
    parameter_bytes,
)
from .mesh_pipeline import is_mesh_run
from .projected_compute import (
    Compute,
    ComputePlan,
    add_band,
    compute_plan,
    experiment_compute,
    link_note,
)
from .speedup_baseline import Candidate, baseline_index
from .step_time_model import Partition, Prediction, Workload, single_device
from .tensor_cost import tensor_predictions

LinkSpec = str | Mapping[str, Any] | Interconnect
DeviceSpec = str | Mapping[str, Any] | Device


@dataclass(frozen=True)
class _Plan:
    """What one `project_results` call asks, shared by every experiment it projects."""

    link: Interconnect  # pipeline sends, and all-reduces unless reduce_link is given
    reduce_link: Interconnect | None  # data+model: the link between copies of the pipeline
    counts: tuple[int, ...]  # device counts to project onto
    strategies: tuple[str, ...] | None  # None: the measured ones
    overlap: bool
    scale: float | None  # compute_scale given by the caller
    target: Device | None  # the device projected onto, when named
    measured: Device | None  # the device the runs were measured on, when named
    backward_ratio: float | None
    schedule: str | None
    micro_batches: int | None
    cut_bytes: float | None  # activation bytes per sample across a cut, when given
    hybrid_stages: int | None
    label: str  # experiment id suffix
    compute: ComputePlan = ComputePlan(mode="measured")  # counted work or measured time
    cluster: Any = None  # a GPUCluster: each axis of a 3-D pipeline row on the link it crosses


@dataclass(frozen=True)
class ProjectionOptions:
    """How `project_results` projects, beyond the link and the device counts.

    Every field defaults to the projection's own choice. `Comparison.project` builds one from
    its keywords. `compute`, `precision`, `efficiency`, `calibrate` and `global_batch` are
    described in `projected_compute.compute_plan`; `docs/projection.md` gives the assumptions.

    Args:
        strategies: the strategies to project (a projected single-device row is always added);
            default the measured ones. "data+model" needs `hybrid_stages`.
        overlap: the backward overlaps the all-reduce, and pipeline sends overlap compute.
        compute_scale: the projected device is this many times as fast as the measured one.
        device: the device projected onto: a preset name or a dict.
        measured_device: the device the runs were measured on, with `device`: a preset or a
            dict.
        backward_ratio: backward seconds over forward seconds; default what the pipeline runs
            timed, else 2.
        schedule: the pipeline schedule, instead of the measured runs'.
        micro_batches: the pipeline's micro-batches, instead of the measured runs'.
        cut_bytes_per_sample: activation bytes per sample across each cut, instead of the
            measured ones.
        hybrid_stages: K, the stages of each copy of a data+model pipeline: a row for every
            count that is 2K or more and a multiple of K.
        data_link: the link carrying the data+model all-reduces; default the projection's.
        label: the experiment id's suffix, instead of one named after the link and device.
        compute: "counted" (the step's counted work on the device's roofline) or "measured".
        precision: the projected device's arithmetic (fp32, tf32, bf16, fp16).
        efficiency: the share of the roofline the step reaches, as a band.
        calibrate: a measured one-GPU throughput that replaces the band.
        global_batch: the global batch to project at; default the measured one.
        work: experiment id -> `WorkCount` (or the sentence saying why there is none); given,
            compute is counted by default.
        cluster: a `GPUCluster` (`gpu_cluster.project_onto_cluster` passes it) that places
            each axis of a pipeline run on (data, model) sub-meshes on the link it crosses.
    """

    strategies: Sequence[str] | None = None
    overlap: bool = False
    compute_scale: float | None = None
    device: DeviceSpec | None = None
    measured_device: DeviceSpec | None = None
    backward_ratio: float | None = None
    schedule: str | None = None
    micro_batches: int | None = None
    cut_bytes_per_sample: float | None = None
    hybrid_stages: int | None = None
    data_link: LinkSpec | None = None
    label: str | None = None
    compute: str | None = None
    precision: str = "bf16"
    efficiency: Any = None
    calibrate: Any = None
    global_batch: int | None = None
    work: Mapping[str, Any] | None = None
    cluster: Any = None


def project_results(
    results: Sequence[RunResult],
    preset: LinkSpec,
    devices: int | Sequence[int],
    options: ProjectionOptions = ProjectionOptions(),
) -> list[RunResult]:
    """Projected rows for every experiment in `results` that has a finished single-device run.

    Measured rows are never changed; rows projected earlier are ignored.

    Args:
        results: the measured runs, of one experiment or several.
        preset: the link between the devices: an interconnect's name
            (`hardware_presets.INTERCONNECTS`) or a dict, e.g.
            `{"name": "my-ib", "bandwidth_gb_s": 40, "latency_us": 4}`.
        devices: the device counts to project onto.
        options: everything else, each with the projection's own default.

    Returns:
        One `RunResult` per strategy and device count, with `projected=True`.
    """
    link = hardware_presets.interconnect(preset)
    measured = options.compute_scale is not None or options.measured_device is not None
    asked = compute_plan(
        options.compute,
        options.device,
        options.precision,
        options.efficiency,
        options.calibrate,
        options.global_batch,
        options.work,
        measured,
        link,
    )
    target = (
        asked.device
        if asked.mode == "counted" or options.device is None
        else hardware_presets.device(options.device)
    )
    named = None if asked.fell_back else target
    plan = _Plan(
        link=link,
        reduce_link=_read(hardware_presets.interconnect, options.data_link),
        counts=_counts(devices),
        strategies=_strategies(options.strategies, options.hybrid_stages),
        overlap=options.overlap,
        scale=options.compute_scale,
        target=target,
        measured=_read(hardware_presets.device, options.measured_device),
        backward_ratio=options.backward_ratio,
        schedule=options.schedule,
        micro_batches=options.micro_batches,
        cut_bytes=options.cut_bytes_per_sample,
        hybrid_stages=options.hybrid_stages,
        label=options.label or _label(link, named, options.compute_scale),
        compute=asked,
        cluster=options.cluster,
    )
    experiments: dict[tuple[str, str], list[RunResult]] = {}
    for result in results:
        if not result.projected:  # each backend projects from its own baseline
            experiments.setdefault((result.experiment_id, result.backend), []).append(result)
    rows = []
    for runs in experiments.values():
        baseline = _baseline(runs)
        if baseline is not None:
            rows += add_band(
                plan.compute,
                _Experiment.of(plan, baseline, runs).rows(),
                lambda c, b=baseline, r=runs: _Experiment.of(replace(plan, compute=c), b, r).rows(),
            )
    if not rows:
        raise GpkError(
            "no experiment in these results has a finished single-device run to project from; "
            "run strategy='single' (or any strategy on 1 device) first"
        )
    return rows


class PipelineConfig(NamedTuple):
    """One pipeline configuration to project."""

    schedule: str
    micro_batches: int


@dataclass(frozen=True)
class _Experiment:
    """One experiment's measured runs, reduced to what the cost model needs."""

    plan: _Plan
    baseline: RunResult  # the measured run compute comes from
    runs: tuple[RunResult, ...]
    workload: Workload  # scaled to the projected device
    scale: float
    notes: tuple[str, ...]  # assumptions shared by every row
    models: tuple[RunResult, ...]  # finished pipeline runs
    compute: Compute | None = None  # where compute comes from; None: measured

    def workload_at(self, samples: float) -> Workload:
        """One device's workload when it computes `samples` per step or micro-batch."""
        return self.workload if self.compute is None else self.compute.workload_at(samples)

    @classmethod
    def of(cls, plan: _Plan, baseline: RunResult, runs: list[RunResult]) -> _Experiment:
        models = tuple(r for r in runs if r.ok and has(r.strategy, "stages"))
        ratio, ratio_note = backward_ratio(plan.backward_ratio, models)
        found = experiment_compute(
            plan.compute,
            baseline,
            parameter_bytes(baseline, runs),
            ratio,
            (ratio_note, link_note(plan.link)),
            lambda fell_back: _scale(
                replace(plan, target=None) if fell_back else plan, baseline.device_kind
            ),
        )
        return cls(
            plan=plan,
            baseline=baseline,
            runs=tuple(runs),
            workload=found.workload,
            scale=found.scale,
            notes=found.notes,
            models=models,
            compute=found.compute,
        )

    def rows(self) -> list[RunResult]:
        """The projected single device, then each wanted strategy's rows from the projector
        its record names, in the registry's order."""
        plan = self.plan
        wanted = plan.strategies
        if wanted is None:
            wanted = tuple(dict.fromkeys(canonical(r.strategy) for r in self.runs if r.ok))
        if plan.hybrid_stages is not None:
            wanted = (*wanted, DATA_PIPELINE.name)
        batch = self.batch(1)
        rows = [self.row(single_device(self.workload_at(batch), batch), "single-1")]
        for record in REGISTERED:
            if record.name in wanted and record.projector is not None:
                rows += resolve(record.projector)(self, record)
        return rows

    def tensor_rows(self) -> list[RunResult]:
        return [
            self.row(p, key, note, mesh=mesh)
            for p, key, note, mesh in tensor_predictions(
                self.workload_at, self.runs, self.plan.counts, self.plan.link, self.batch
            )
        ]

    def batch(self, devices: int) -> int:
        # Weak scaling keeps each device's share of the baseline's (or the asked) batch.
        batch = self.plan.compute.global_batch or self.baseline.global_batch
        return batch * (devices if self.baseline.scaling == "weak" else 1)

    def pipeline_configs(self) -> list[PipelineConfig]:
        """The schedules and micro-batches to project: the caller's, else the measured ones."""
        plan = self.plan
        if plan.schedule is not None or plan.micro_batches is not None:
            m = plan.micro_batches or 1
            return [PipelineConfig(plan.schedule or default_schedule(m), m)]
        # The cost model holds one stage per device: runs of model chunks are not projected.
        found = [
            PipelineConfig(r.schedule, r.micro_batches or 1)
            for r in self.models
            if r.schedule and not schedule_record(r.schedule).virtual_stages
        ]
        return list(dict.fromkeys(found)) or [PipelineConfig(default_schedule(1), 1)]

    def partition(self, k: int) -> NotedPartition:
        """The split of a measured k-stage run, else k equal stages."""
        given = self.plan.cut_bytes
        for run in self.models:
            if run.devices == k and run.extra.get("stages") and not is_mesh_run(run):
                return measured_partition(run, k, given)
        if given is not None:
            note = f"{given:g} activation bytes per sample across each cut (given)"
        elif k == 1:
            given, note = 0.0, "nothing crosses a cut"
        else:
            per_cut = [
                c / 2 / r.global_batch for r in self.models for c in r.extra.get("cut_bytes", [])
            ]
            if not per_cut:
                raise GpkError(
                    f"no measured pipeline run tells the bytes across a cut of {k} "
                    "stages; run strategy='model' first or pass cut_bytes_per_sample="
                )
            given = statistics.fmean(per_cut)
            note = f"{given:.4g} activation bytes per sample across each cut (measured mean)"
        return NotedPartition(Partition.equal(k, given), f"{k} equal stages (assumed); {note}")

    def row(self, p: Prediction, key: str, note: str = "", **fields: Any) -> RunResult:
        plan, base = self.plan, self.baseline
        experiment_id = f"{base.experiment_id}:{plan.label}"
        backend = "" if of_row(base.backend).default else f"@{base.backend}"
        extra: dict[str, Any] = {
            "preset": plan.link.name,
            "interconnect": {
                "bandwidth_bytes_s": plan.link.bandwidth_bytes_s,
                "latency_s": plan.link.latency_s,
                "source": plan.link.source,
            },
            "compute_scale": self.scale,
            "overlap": plan.overlap,
            "baseline_run_id": base.run_id,
            "parameter_bytes": self.workload.parameter_bytes,
            "compute_s": p.compute_s,
            "exposed_comm_s": p.exposed_comm_s,
            "comm_total_s": p.comm_time_s,
            "assumptions": [*self.notes, note] if note else list(self.notes),
            **(self.compute.extra if self.compute is not None else {}),
        }
        if has(p.strategy, "stages"):
            extra["bubble_fraction"] = p.bubble_fraction  # modelled, as is every figure here
        compute = self.compute.reason if self.compute is not None else ""
        return RunResult(
            run_id=f"{experiment_id}:{key}{backend}",
            experiment_id=experiment_id,
            strategy=fields.pop("strategy", p.strategy),
            devices=p.devices,
            virtual=False,
            status="ok",
            reason=f"projected on {plan.label}, {compute}",
            device_kind="gpu" if plan.target and self.compute.on_target else base.device_kind,
            global_batch=int(p.global_batch),
            scaling=base.scaling,
            mode="",
            step_time_s=p.step_time_s,
            throughput_samples_s=p.throughput_samples_s,
            # Exposed, as a measured row's: what communication adds to the step. All of it,
            # hidden or not, can exceed the step where a pipeline's links send side by side.
            comm_time_s=p.exposed_comm_s,
            comm_share=p.exposed_comm_s / p.step_time_s,
            comm_bytes=round(p.comm_bytes),
            projected=True,
            extra=extra,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
            backend=base.backend,
            **fields,
        )


def _baseline(runs: list[RunResult]) -> RunResult | None:
    """The experiment's baseline, by the table's rule (`analysis.cost_model.speedup_baseline`)."""
    position = baseline_index(
        Candidate(r.status, r.strategy, r.devices, r.throughput_samples_s) for r in runs
    )
    return None if position is None else runs[position]


def _scale(plan: _Plan, kind: str) -> NotedFigure:
    if plan.scale is not None:
        return NotedFigure(
            plan.scale, f"compute {plan.scale:g}× as fast as on the measured {kind} (given)"
        )
    if plan.target is None:
        return NotedFigure(
            1.0,
            f"compute as fast as on the measured {kind} (compute_scale 1): only communication "
            "is projected",
        )
    if plan.measured is None:
        raise GpkError(
            f"device={plan.target.name!r} needs the device the runs were measured on ({kind}, "
            "which has no preset); pass measured_device= (a preset such as 'a100', or a dict "
            "with tflops, memory_gb and memory_bandwidth_gb_s) or compute_scale="
        )
    ratio = hardware_presets.compute_scale(plan.measured, plan.target)
    note = (
        f"compute {ratio:.3g}× as fast: dense bf16 rate of {plan.target.name} / "
        f"{plan.measured.name}, assuming the same share of peak on both"
    )
    if kind == "cpu":
        note += "; the runs were measured on a CPU, so this CPU-to-GPU scale is a rough guess"
    return NotedFigure(ratio, note)


def _strategies(given: Sequence[str] | None, hybrid: int | None) -> tuple[str, ...] | None:
    """The strategies asked for, checked; "data+pipeline" comes from `hybrid` alone."""
    if hybrid is not None:
        whole_number(hybrid, "hybrid_stages", hint="the stages per pipeline")
    if given is None:
        return None
    chosen = [given] if isinstance(given, str) else list(given)
    records = []
    for name in chosen:
        record = lookup(name)
        if record is None or (record.projector is None and not record.baseline):
            known = ", ".join(repr(s) for s in projectable_names())
            raise GpkError(f"strategy {name!r} cannot be projected; use one of {known}")
        records.append(record)
    # A pipeline's copies come from hybrid_stages alone: asked by name, they need it.
    hybrid_records = [r for r in records if not r.runnable]
    if hybrid_records and hybrid is None:
        raise GpkError(
            f"strategy {hybrid_records[0].name!r} needs hybrid_stages=K, the stages per pipeline"
        )
    # The baseline is always projected; the hybrid is added by hybrid_stages.
    return tuple(dict.fromkeys(r.name for r in records if r.runnable and not r.baseline))


def _read(preset: Callable[[Any], Any], given: Any) -> Any:
    """A link or device read off its preset name or dict, None where none is given."""
    return None if given is None else preset(given)


def _label(link: Interconnect, target: Device | None, scale: float | None) -> str:
    if target is not None:
        return f"{link.name}+{target.name}"
    return link.name if scale is None else f"{link.name}x{scale:g}"


def _counts(devices: int | Sequence[int]) -> tuple[int, ...]:
    counts = [devices] if isinstance(devices, int) else list(devices)
    for n in counts:
        whole_number(n, "devices", hint="project onto 1 device or more")
    if not counts:
        raise GpkError("devices=[] holds no count; give e.g. devices=[1, 2, 4, 8]")
    return tuple(dict.fromkeys(counts))
