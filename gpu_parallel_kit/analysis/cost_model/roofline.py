"""A step's compute time on a GPU from its counted work: roofline, efficiency band, launch floor.

Pure arithmetic on `counted_work.WorkCount` and `hardware_presets.Device`; no TensorFlow, no JAX.
For one device computing b samples per step at precision p::

    flops = F₁·b + F₀                                  (work.WorkCount)
    bytes = fusion · (a_p · B₁·b + B₀)
    time  = max( max(flops / peak_p, bytes / bandwidth) / efficiency,  kernels · launch )

Why each term, the band's sources and the published figures it is checked against:
`docs/projection.md`, "The roofline, term by term".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from ...errors import GpkError
from .counted_work import WorkCount
from .hardware_presets import Device, check_precision

LAUNCH_S = 4e-6  # per kernel launch: NVIDIA's measured ~3.8 µs, rounded up
ACTIVATION_WIDTH = {"fp32": 1.0, "tf32": 1.0, "bf16": 0.5, "fp16": 0.5}
WEIGHTED_KINDS = (
    "Dense",
    "EinsumDense",
    "Conv1D",
    "Conv2D",
    "Conv3D",
    "DepthwiseConv2D",
    "SeparableConv2D",
    "Conv2DTranspose",
    "Embedding",
    "MultiHeadAttention",
)
CALIBRATED_SPREAD = 0.1  # a calibrated band: the measured share ± 10 % (run-to-run spread)


@dataclass(frozen=True)
class Efficiency:
    """The share of the roofline that training reaches: low, likely and high."""

    low: float
    likely: float
    high: float
    source: str = "assumed"  # "assumed" (MFU of published runs) or what calibrated it

    def __post_init__(self) -> None:
        values = (self.low, self.likely, self.high)
        if not all(math.isfinite(v) and 0 < v <= 1 for v in values):
            raise GpkError(f"efficiency {values} must lie in (0, 1]; e.g. (0.3, 0.45, 0.6)")
        if not self.low <= self.likely <= self.high:
            raise GpkError(f"efficiency {values} must be ordered low <= likely <= high")

    def __repr__(self) -> str:
        return f"<Efficiency {self.low:.3g} / {self.likely:.3g} / {self.high:.3g} ({self.source})>"

    def at(self, which: str) -> float:
        return {"low": self.low, "likely": self.likely, "high": self.high}[which]

    def for_plan(self, card: object, plan: object) -> Efficiency:
        """The band a parallel plan's step is timed at: this one, whatever the plan (a
        `matmul_efficiency.MatmulEfficiency` gives one per plan's matmul shapes)."""
        return self


DEFAULT_EFFICIENCY = Efficiency(0.30, 0.45, 0.60, "assumed: MFU of published runs (PaLM, Megatron)")


def fusion(work: WorkCount) -> float:
    """The share of the counted bytes a GPU moves: forward bytes of layers with weights over
    those of all layers (1 when the count has no per-layer figures)."""
    total = math.fsum(layer.forward_bytes for layer in work.layers)
    weighted = math.fsum(
        layer.forward_bytes for layer in work.layers if layer.kind in WEIGHTED_KINDS
    )
    return weighted / total if total > 0 and weighted > 0 else 1.0


@dataclass(frozen=True)
class StepCompute:
    """One device's compute for one step, and what bounds it."""

    seconds: float
    bound: str  # "compute", "memory" or "launches"
    flops: float
    bytes: float

    def __repr__(self) -> str:
        return f"<StepCompute {self.seconds * 1e3:.4g} ms, {self.bound}-bound>"


class Roofline(NamedTuple):
    """A step's time at the device's peak, and which of its limits sets it."""

    seconds: float
    bound: str  # "compute" or "memory"


def roofline_s(work: WorkCount, device: Device, precision: str, batch: float) -> Roofline:
    """max(flops / peak, bytes / bandwidth) for `batch` samples, and which term rules."""
    check_precision(precision)
    if not batch > 0:
        raise GpkError(f"batch={batch} is too small; a step computes at least one sample")
    flops = work.flops(batch)
    moved = fusion(work) * (
        ACTIVATION_WIDTH[precision] * work.bytes_per_sample * batch + work.bytes_per_step
    )
    compute = flops / device.peak_flops(precision)
    memory = moved / device.memory_bandwidth_bytes_s
    return Roofline(compute, "compute") if compute >= memory else Roofline(memory, "memory")


def launch_floor_s(work: WorkCount) -> float:
    return work.kernels * LAUNCH_S


def step_compute(
    work: WorkCount, device: Device, precision: str, batch: float, efficiency: float
) -> StepCompute:
    """One device's compute time for a step of `batch` samples at a share `efficiency`."""
    roof, bound = roofline_s(work, device, precision, batch)
    seconds = roof / efficiency
    floor = launch_floor_s(work)
    if floor > seconds:
        seconds, bound = floor, "launches"
    moved = fusion(work) * (
        ACTIVATION_WIDTH[precision] * work.bytes_per_sample * batch + work.bytes_per_step
    )
    return StepCompute(seconds, bound, work.flops(batch), moved)


@dataclass(frozen=True)
class Calibration:
    """A throughput of this model on a named device: measured on a GPU, or published."""

    throughput_samples_s: float
    device: str  # a preset name
    global_batch: int  # samples per step on that one device
    precision: str = "bf16"
    source: str = "given"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.throughput_samples_s) and self.throughput_samples_s > 0):
            raise GpkError(
                f"throughput_samples_s={self.throughput_samples_s} is not usable; "
                "give the samples per second measured on one device"
            )
        if self.global_batch < 1:
            raise GpkError(f"global_batch={self.global_batch} is too small; use 1 or more")
        check_precision(self.precision)


def calibrated_efficiency(work: WorkCount, device: Device, calibration: Calibration) -> float:
    """The share of the roofline that reproduces the calibration's throughput."""
    batch = calibration.global_batch
    measured = batch / calibration.throughput_samples_s
    floor = launch_floor_s(work)
    if measured <= floor:
        raise GpkError(
            f"{calibration.throughput_samples_s:g} samples/s at batch {batch} is faster than "
            f"this model's launch floor ({floor * 1e3:.3g} ms per step on {device.name}); "
            "check the throughput and the batch it was measured at"
        )
    roof, _ = roofline_s(work, device, calibration.precision, batch)
    share = roof / measured
    if share > 1:
        raise GpkError(
            f"{calibration.throughput_samples_s:g} samples/s would need {share:.2f} × the peak "
            f"of {device.name} at {calibration.precision}; check the device and the precision"
        )
    return share


def calibrated_band(work: WorkCount, device: Device, calibration: Calibration) -> Efficiency:
    share = calibrated_efficiency(work, device, calibration)
    return Efficiency(
        share * (1 - CALIBRATED_SPREAD),
        share,
        min(1.0, share * (1 + CALIBRATED_SPREAD)),
        f"calibrated: {calibration.throughput_samples_s:g} samples/s on {device.name} at "
        f"batch {calibration.global_batch}, {calibration.precision} ({calibration.source})",
    )
