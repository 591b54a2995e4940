"""A step's compute time on a GPU from its counted work: a roofline, an efficiency band and a
launch floor. Pure arithmetic on `counted_work.WorkCount` and `hardware_presets.Device`; no
TensorFlow, no JAX.

For one device computing b samples per step at precision p::

    flops = F₁·b + F₀                                  (work.WorkCount)
    bytes = fusion · (a_p · B₁·b + B₀)
    time  = max( max(flops / peak_p, bytes / bandwidth) / efficiency,  kernels · launch )

**Bytes.** The compiler that counts (XLA on the CPU) fuses less than a GPU's: a convolution's
batch normalisation, activation and residual add are separate passes over memory there, while on
a GPU they run in the convolution's epilogue (cuDNN runtime fusion, XLA's GPU fusion). So the
count's bytes are an upper bound, and `fusion` takes off what fuses: the share of the forward
bytes that belongs to layers with weights (convolutions, dense layers, embeddings), from the
count's own per-layer figures (1 for a model made of Dense layers only; 0.52 for Keras's
ResNet-50, whose every convolution is followed by a BatchNormalization and a ReLU). A model
without per-layer figures keeps its bytes (fusion 1). a_p is the width of an activation: 0.5
under bf16 / fp16 mixed precision (activations in 16 bits, weights and optimizer state in 32),
1 under fp32 and tf32; B₀ (weights and optimizer state, once per step) stays at 32 bits.

**Efficiency** is the share of the roofline that real training reaches, given as a band:

| band   | value | measured share of peak (model FLOPs utilisation, MFU)                       |
|--------|------:|------------------------------------------------------------------------------|
| low    |  0.30 | GPT-3 21.3 %, Megatron-Turing NLG 30.2 %, Gopher 32.5 % (Chowdhery et al.,  |
|        |       | "PaLM: Scaling Language Modeling with Pathways", 2022, table 3)              |
| likely |  0.45 | PaLM 540B 46.2 % (same table)                                                |
| high   |  0.60 | Megatron-LM, 1T parameters: 56.3 % MFU, 57.0 % hardware FLOPs utilisation    |
|        |       | (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer |
|        |       | Models", 2022)                                                               |

Those are large runs, whose share already pays for communication and pipeline bubbles; one GPU
training alone reaches at least as much, so "likely" is the best of them, not their mean. Checked
against published single-GPU training throughputs (the counted Keras ResNet-50, 22.6 GFLOP and
1.54 GB per sample, bf16, batch 256; `tests/analysis/cost_model/test_roofline.py` holds the
arithmetic):

| device, precision | projected: low / likely / high | published                              |
|-------------------|--------------------------------|----------------------------------------|
| A100, bf16 mixed  | 1,540 / 2,310 / 3,070 img/s    | 2,375 img/s: NVIDIA DeepLearningExamples |
|                   |                                | TF ResNet-50 v1.5, AMP + XLA, 1 GPU    |
| A100, tf32        |   770 / 1,160 / 1,540 img/s    | 909 img/s: same table, TF32 + XLA      |
| H100, bf16 mixed  | 2,530 / 3,790 / 5,050 img/s    | ~6,900 img/s per GPU: MLPerf Training  |
|                   |                                | v3.0, 8×H100 in 13.47 min (3.0-2053),  |
|                   |                                | ~37 epochs of ImageNet's 1.28 M images |

The H100 comes out low against MLPerf's hand-tuned MXNet (within a factor of 2): its memory
term rules, and MLPerf's fused kernels move fewer bytes than this allowance assumes.

**The launch floor.** However little a step computes, the host launches each kernel of the
compiled step one after another; NVIDIA measured about 3.8 µs per launch of back-to-back short
kernels ("Getting Started with CUDA Graphs", NVIDIA technical blog, 2019), so a step takes at
least `kernels` × `LAUNCH_S`, with `kernels` counted in the compiled step (on the CPU, which
fuses less, so the floor leans high). Launches overlap the GPU's work, so the floor is a lower
bound on the step, not a term added to it. It is what rules a small model: the kit's built-in
MLP (68 kernels) cannot step faster than 0.27 ms on any GPU, whatever the batch share.

**Calibrating.** A throughput measured (or published) for the same model on a named device and
batch replaces the assumed band: efficiency = roofline time / measured time, so the projection
reproduces it, and other batches and device counts follow the model (`calibrated_band`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


def roofline_s(work: WorkCount, device: Device, precision: str, batch: float) -> tuple[float, str]:
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
    return (compute, "compute") if compute >= memory else (memory, "memory")


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
