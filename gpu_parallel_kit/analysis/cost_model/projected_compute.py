"""Where a projected row's compute comes from: the step's counted work on the target GPU's
roofline (the default), or the measured step time (`compute="measured"`, or when the step could
not be counted). Used by `analysis/cost_model/projected_rows.py`; pure, no TensorFlow.

With counted work, the compute of one device's step depends on the samples it computes per step
(the launch floor and the per-step work do not shrink with the batch), so a projector asks
`Compute.workload_at(samples)` for the workload of a device computing that many samples in one
go: G/N for data parallel, G/M for a pipeline's micro-batch. With measured compute every batch
gets the same per-sample workload, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ...errors import GpkError
from ...runs.results.run_result import RunResult
from . import hardware_presets
from .compute_source import not_counted
from .counted_work import WorkCount
from .hardware_presets import Device, Interconnect
from .measured_inputs import NotedFigure
from .roofline import (
    DEFAULT_EFFICIENCY,
    Calibration,
    Efficiency,
    calibrated_band,
    fusion,
    step_compute,
)
from .step_time_model import Workload

COMPUTE_MODES = ("counted", "measured")


@dataclass(frozen=True)
class ComputePlan:
    """What the caller asked of the compute side of a projection."""

    mode: str = "counted"  # counted | measured
    device: Device | None = None  # None: the link's usual GPU (counted) or none (measured)
    precision: str = "bf16"
    efficiency: Efficiency | None = None  # None: calibrated, else DEFAULT_EFFICIENCY
    calibration: Calibration | None = None
    global_batch: int | None = None  # None: the measured baseline's
    work: Mapping[str, WorkCount | str] = field(default_factory=dict)  # experiment id -> count
    which: str = "likely"  # the band's member these rows use: low | likely | high

    @property
    def fell_back(self) -> bool:
        """Counted compute was asked but no experiment has a count: every row is measured."""
        return self.mode == "counted" and not any(
            isinstance(w, WorkCount) for w in self.work.values()
        )


def compute_plan(
    compute: str | None,
    device: Any,
    precision: str,
    efficiency: Any,
    calibrate: Any,
    global_batch: int | None,
    work: Mapping[str, WorkCount | str] | None,
    measured_asked: bool,
    link: Interconnect,
) -> ComputePlan:
    """The caller's options, checked. `compute="counted"` (the default when `work` is given)
    puts each experiment's counted step on the roofline of `device` (default: the link's usual
    GPU) at `precision` (fp32, tf32, bf16, fp16), with the `efficiency` band (low, likely, high)
    or the share that reproduces `calibrate`; an experiment without a count falls back to
    measured compute, and its rows say so. `compute="measured"` (implied by compute_scale= or
    measured_device=, `measured_asked`) keeps the measured step time. `global_batch` projects
    at another global batch than the measured one. Counted rows carry
    `extra["compute_source"]`, `flops_per_sample`, `efficiency` and `step_time_low_s` /
    `step_time_high_s`, the band's fastest and slowest step."""
    if compute is None and work is None:
        compute = "measured"  # nothing counted was handed in
    mode = compute or ("measured" if measured_asked else "counted")
    if mode not in COMPUTE_MODES:
        raise GpkError(f"compute={compute!r} is not known; use 'counted' or 'measured'")
    if mode == "counted" and measured_asked:
        raise GpkError(
            "compute_scale= and measured_device= scale measured compute; drop them, or use "
            "compute='measured'"
        )
    hardware_presets.check_precision(precision)
    if global_batch is not None and (
        isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1
    ):
        raise GpkError(f"global_batch={global_batch!r} is not a batch; give a whole number >= 1")
    target = None if device is None else hardware_presets.device(device)
    if target is None and mode == "counted":
        target = hardware_presets.usual_device(link)
    band = None
    if efficiency is not None:
        band = efficiency if isinstance(efficiency, Efficiency) else Efficiency(*efficiency)
    return ComputePlan(
        mode=mode,
        device=target,
        precision=precision,
        efficiency=band,
        calibration=calibration(calibrate, precision),
        global_batch=global_batch,
        work=dict(work or {}),
    )


def calibration(given: Any, precision: str) -> Calibration | None:
    """A `Calibration` from a dict (throughput_samples_s, device, global_batch, precision), a
    finished GPU run (its throughput at its batch; `extra["gpu_preset"]` names its device), or
    one already made."""
    if given is None or isinstance(given, Calibration):
        return given
    if isinstance(given, RunResult):
        preset = given.extra.get("gpu_preset")
        if not given.ok or given.device_kind != "gpu" or not preset or given.devices != 1:
            raise GpkError(
                f"run {given.run_id} cannot calibrate: it needs a finished one-GPU run whose "
                "extra['gpu_preset'] names its device (benchmarks/gpu_check.py records it), or "
                "give a dict with throughput_samples_s, device and global_batch"
            )
        return Calibration(
            float(given.throughput_samples_s or 0),
            str(preset),
            given.global_batch,
            str(given.extra.get("precision", precision)),
            f"run {given.run_id}",
        )
    if isinstance(given, Mapping):
        missing = [k for k in ("throughput_samples_s", "device", "global_batch") if k not in given]
        if missing:
            raise GpkError(
                f"calibrate={dict(given)!r} has no {', '.join(missing)}; e.g. "
                "{'throughput_samples_s': 2375, 'device': 'a100', 'global_batch': 256}"
            )
        return Calibration(
            float(given["throughput_samples_s"]),
            str(given["device"]).lower(),
            int(given["global_batch"]),
            str(given.get("precision", precision)),
            str(given.get("source", "given")),
        )
    raise TypeError(f"calibrate= takes a dict or a RunResult, not {type(given).__name__}")


@dataclass(frozen=True)
class Compute:
    """One experiment's compute, resolved: a workload for any samples per device step."""

    source: str  # "counted" or "measured"
    reason: str  # the row's words, e.g. "compute counted on h100 at bf16, efficiency 0.45"
    notes: tuple[str, ...]  # assumptions shared by every row
    extra: dict[str, Any]  # figures every row carries
    at: Callable[[float], Workload]  # workload of a device computing that many samples
    on_target: bool = True  # False: a count was asked for but missing, compute is the CPU's

    def workload_at(self, samples: float) -> Workload:
        return self.at(samples)


def measured_compute(workload: Workload, reason: str, note: str = "") -> Compute:
    return Compute(
        "measured",
        reason,
        (note,) if note else (),
        {"compute_source": "measured"},
        lambda samples: workload,
    )


def counted_compute(
    plan: ComputePlan,
    baseline: RunResult,
    parameter_bytes: float,
    ratio: float,
) -> Compute | str:
    """The counted compute on the plan's device, or one sentence saying why there is none."""
    found = plan.work.get(baseline.experiment_id)
    if not isinstance(found, WorkCount):
        return found or "the step of this model was not counted"
    work, device = found, plan.device
    assert device is not None  # compute_plan sets the usual GPU
    band = plan.efficiency or DEFAULT_EFFICIENCY
    if plan.calibration is not None:
        band = calibrated_band(
            work, hardware_presets.device(plan.calibration.device), plan.calibration
        )
    share = band.at(plan.which)

    def at(samples: float) -> Workload:
        step = step_compute(work, device, plan.precision, max(samples, 1e-9), share)
        return Workload.from_step_time(step.seconds, 1, parameter_bytes, ratio).scaled(samples)

    batch = plan.global_batch or baseline.global_batch
    whole = step_compute(work, device, plan.precision, batch, band.likely)
    notes = (
        f"compute counted by {work.source}: {work.flops_per_sample / 1e9:.4g} GFLOP and "
        f"{work.bytes_per_sample / 1e6:.4g} MB per sample, {work.flops_per_step / 1e9:.3g} "
        f"GFLOP per step, {work.kernels} kernels",
        f"on {device.name} at {plan.precision}: {device.peak_flops(plan.precision) / 1e12:g} "
        f"TFLOP/s, {device.memory_bandwidth_bytes_s / 1e12:g} TB/s ({device.source}); bytes "
        f"× {fusion(work):.2f} for what a GPU fuses",
        f"efficiency {band.low:.3g} / {band.likely:.3g} / {band.high:.3g} ({band.source}); "
        f"launch floor {work.kernels} × 4 µs",
        f"one device's step of {batch} samples is {whole.bound}-bound: "
        f"{whole.seconds * 1e3:.4g} ms",
    )
    extra = {
        "compute_source": f"counted: {work.source}",
        "flops_per_sample": work.flops_per_sample,
        "bytes_per_sample": work.bytes_per_sample,
        "efficiency": share,
        "efficiency_band": [band.low, band.likely, band.high],
        "compute_bound": whole.bound,
        "gpu": device.name,
        "precision": plan.precision,
    }
    words = {"launches": "kernel launches", "compute": "arithmetic", "memory": "memory traffic"}
    reason = (
        f"compute counted on {device.name} at {plan.precision}, efficiency {share:.3g}; "
        f"one device's step bound by {words[whole.bound]}"
    )
    return Compute("counted", reason, notes, extra, at)


def link_note(link: Interconnect) -> str:
    return (
        f"link {link.name}: {link.bandwidth_bytes_s / 1e9:g} GB/s, "
        f"{link.latency_s * 1e6:g} µs per message ({link.source or 'user'})"
    )


class ExperimentCompute(NamedTuple):
    """Where an experiment's projected compute comes from, and what the rows say of it."""

    workload: Workload  # at the baseline's (or the asked) global batch
    scale: float  # how many times as fast as the measured device; 1 for counted compute
    notes: tuple[str, ...]  # the assumptions every row of the experiment states
    compute: Compute


def experiment_compute(
    plan: ComputePlan,
    baseline: RunResult,
    parameter_bytes: float,
    ratio: float,
    later_notes: tuple[str, ...],
    measured_scale: Callable[[bool], NotedFigure],
) -> ExperimentCompute:
    """An experiment's workload at its baseline's batch, its compute scale, its notes and its
    `Compute`; `measured_scale(fell_back)` gives the measured side's scale and its note."""
    counted = None
    if plan.mode == "counted":
        counted = counted_compute(plan, baseline, parameter_bytes, ratio)
    if isinstance(counted, Compute):
        workload = counted.workload_at(plan.global_batch or baseline.global_batch)
        return ExperimentCompute(workload, 1.0, (*counted.notes, *later_notes), counted)
    scale, scale_note = measured_scale(counted is not None)
    workload = Workload.from_step_time(
        baseline.step_time_s, baseline.global_batch, parameter_bytes, ratio
    ).scaled(scale)
    fallback = () if counted is None else (f"{counted}: compute as measured instead",)
    notes = (
        f"compute from {baseline.strategy} run {baseline.run_id}: "
        f"{baseline.step_time_s:.4g} s per step of {baseline.global_batch} samples",
        *fallback,
        scale_note,
        *later_notes,
    )
    if fallback:
        reason = not_counted(baseline.device_kind)
    elif scale == 1:
        reason = f"compute as measured on {baseline.device_kind}"
    else:
        reason = f"compute ×{scale:.3g}"
    compute = replace(measured_compute(workload, reason), on_target=not fallback)
    return ExperimentCompute(workload, scale, notes, compute)


def add_band(
    plan: ComputePlan,
    rows: list[RunResult],
    project: Callable[[ComputePlan], list[RunResult]],
) -> list[RunResult]:
    """Counted rows get the band's fastest and slowest step (at high and low efficiency),
    from `project`, the same projection with another member of the band."""
    if plan.mode != "counted" or not rows or "efficiency" not in rows[0].extra:
        return rows
    fastest = {r.run_id: r.step_time_s for r in project(replace(plan, which="high"))}
    slowest = {r.run_id: r.step_time_s for r in project(replace(plan, which="low"))}
    for row in rows:
        row.extra["step_time_low_s"] = fastest.get(row.run_id)
        row.extra["step_time_high_s"] = slowest.get(row.run_id)
    return rows
