"""Hardware presets for the cost model: interconnects and GPUs the user may not have.

An interconnect is the α-β model's two numbers: a latency α (seconds per message, or per step of
a ring) and a bus bandwidth B in nccl-tests' sense, so a ring all-reduce of S bytes over N devices
takes 2(N-1)/N · S / B; one point-to-point send (a pipeline cut) uses the same B. A device carries
its dense peak rate per precision, its memory and its memory bandwidth, for the roofline
(`analysis/cost_model/roofline.py`). No CPU is listed: a CPU-to-GPU scale is the user's to give.

Every figure and its source: `docs/projection.md`, "Sources".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import GpkError

GB = 1e9


@dataclass(frozen=True)
class Interconnect:
    """A link between devices in the α-β model: a message of n bytes takes α + n / B."""

    name: str  # preset name or the user's label
    bandwidth_bytes_s: float  # B: ring bus bandwidth, also used for one point-to-point send
    latency_s: float = 0.0  # α: per message, and per step of a ring
    source: str = ""  # where the figures come from

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_s > 0:  # also rejects NaN; inf means "free bandwidth"
            raise GpkError(
                f"bandwidth of {self.name!r} is {self.bandwidth_bytes_s}; give bytes/s above 0"
            )
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise GpkError(f"latency of {self.name!r} is {self.latency_s}; give 0 s or more")

    def __repr__(self) -> str:
        return (
            f"<Interconnect {self.name}: {self.bandwidth_bytes_s / GB:g} GB/s, "
            f"{self.latency_s * 1e6:g} µs>"
        )

    def send_s(self, nbytes: float) -> float:
        """Time of one point-to-point message; nothing is sent for 0 bytes."""
        return self.latency_s + nbytes / self.bandwidth_bytes_s if nbytes > 0 else 0.0


# bf16 / fp16: mixed precision, fp32 weights; fp8: its matmuls on FP8 tensor cores (Hopper on)
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class Device:
    """An accelerator's peak rates: per precision, and its memory bandwidth."""

    name: str
    flops: float  # dense bf16 (and fp16) tensor FLOP/s
    memory_bytes: float  # device memory
    memory_bandwidth_bytes_s: float
    source: str = ""
    fp32_flops: float | None = None  # plain fp32 FLOP/s; None: not known
    tf32_flops: float | None = None  # dense tf32 tensor FLOP/s; None: not known
    # A fused (flash) attention kernel runs on it: cuDNN's and FlashAttention-2 need Ampere or
    # later, which every preset is; a device given as a dict says so with "fused_attention".
    fused_attention: bool = True
    fp8_flops: float | None = None  # dense fp8 tensor FLOP/s; None: no FP8 tensor cores

    def __post_init__(self) -> None:
        for what in ("flops", "memory_bytes", "memory_bandwidth_bytes_s"):
            value = getattr(self, what)
            if not (math.isfinite(value) and value > 0):
                raise GpkError(f"{what} of device {self.name!r} is {value}; give a number above 0")
        for what in ("fp32_flops", "tf32_flops", "fp8_flops"):
            value = getattr(self, what)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise GpkError(f"{what} of device {self.name!r} is {value}; give a number above 0")

    def peak_flops(self, precision: str) -> float:
        """The dense peak at `precision` (fp32, tf32, bf16, fp16 or fp8)."""
        check_precision(precision)
        rates = {"fp32": self.fp32_flops, "tf32": self.tf32_flops, "fp8": self.fp8_flops}
        rate = rates.get(precision, self.flops)
        if rate is None:
            raise GpkError(
                f"device {self.name!r} has no {precision} rate; give tflops_{precision} in its "
                "dict, or use precision='bf16'"
            )
        return rate


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        known = ", ".join(repr(p) for p in PRECISIONS)
        raise GpkError(f"precision={precision!r} is not known; use one of {known}")


INTERCONNECTS: dict[str, Interconnect] = {
    link.name: link
    for link in (
        Interconnect("nvlink4", 400 * GB, 3e-6, "NVIDIA H100/H200 datasheets; nccl-tests busbw"),
        Interconnect("nvlink3", 230 * GB, 3e-6, "NVIDIA A100 datasheet; nccl-tests busbw"),
        Interconnect("pcie5", 50 * GB, 5e-6, "PCIe 5.0 x16, ~80 % of 63 GB/s"),
        Interconnect("pcie4", 25 * GB, 5e-6, "PCIe 4.0 x16, ~80 % of 31.5 GB/s"),
        Interconnect("pcie3", 12 * GB, 5e-6, "PCIe 3.0 x16, ~80 % of 15.8 GB/s"),
        Interconnect("net100g", 11 * GB, 10e-6, "100 Gb/s RoCE or EDR InfiniBand, ~90 %"),
        Interconnect("net200g", 22 * GB, 5e-6, "NVIDIA ConnectX-6 HDR InfiniBand, ~90 %"),
        Interconnect("net400g", 45 * GB, 5e-6, "NVIDIA ConnectX-7 NDR / 400 GbE, ~90 %"),
    )
}

DEVICES: dict[str, Device] = {
    device.name: device
    for device in (
        Device(
            "a100", 312e12, 80 * GB, 2.039e12, "NVIDIA A100 datasheet (SXM4 80GB)", 19.5e12, 156e12
        ),
        Device(
            "h100",
            989e12,
            80 * GB,
            3.35e12,
            "NVIDIA H100 datasheet (SXM5)",
            67e12,
            494.7e12,
            fp8_flops=1979e12,
        ),
        Device(
            "h200",
            989e12,
            141 * GB,
            4.8e12,
            "NVIDIA H200 datasheet (SXM)",
            67e12,
            494.7e12,
            fp8_flops=1979e12,
        ),
    )
}


def interconnect(spec: str | Mapping[str, Any] | Interconnect) -> Interconnect:
    """A preset by name, or the user's own link.

    >>> interconnect("nvlink4")
    >>> interconnect({"name": "my-ib", "bandwidth_gb_s": 40, "latency_us": 4})
    """
    if isinstance(spec, Interconnect):
        return spec
    if hasattr(spec, "as_link"):  # a calibration (`device_calibration.DeviceCalibration`)
        return spec.as_link()
    if isinstance(spec, str):
        return _preset(INTERCONNECTS, spec.lower(), "interconnect")
    if not isinstance(spec, Mapping):
        raise TypeError(f"an interconnect is a preset name or a dict, not {type(spec).__name__}")
    bandwidth = _scaled(spec, "bandwidth", {"_gb_s": GB, "_bytes_s": 1.0}, required=True)
    latency = _scaled(spec, "latency", {"_us": 1e-6, "_s": 1.0}, required=False)
    return Interconnect(
        str(spec.get("name", "custom")), bandwidth, latency, str(spec.get("source", "user"))
    )


def device(spec: str | Mapping[str, Any] | Device) -> Device:
    """A preset by name, or the user's own device.

    >>> device({"name": "my-cpu", "tflops": 2, "memory_gb": 64, "memory_bandwidth_gb_s": 100})
    """
    if isinstance(spec, Device):
        return spec
    if hasattr(spec, "as_device"):  # a calibration (`device_calibration.DeviceCalibration`)
        return spec.as_device()
    if isinstance(spec, str):
        return _preset(DEVICES, spec.lower(), "device")
    if not isinstance(spec, Mapping):
        raise TypeError(f"a device is a preset name or a dict, not {type(spec).__name__}")
    return Device(
        str(spec.get("name", "custom")),
        _scaled(spec, "", {"tflops": 1e12, "flops": 1.0}, required=True),
        _scaled(spec, "memory", {"_gb": GB, "_bytes": 1.0}, required=True),
        _scaled(spec, "memory_bandwidth", {"_gb_s": GB, "_bytes_s": 1.0}, required=True),
        str(spec.get("source", "user")),
        *(float(spec[k]) * 1e12 if k in spec else None for k in ("tflops_fp32", "tflops_tf32")),
        bool(spec.get("fused_attention", False)),
        float(spec["tflops_fp8"]) * 1e12 if "tflops_fp8" in spec else None,
    )


def compute_scale(
    measured: str | Mapping[str, Any] | Device,
    target: str | Mapping[str, Any] | Device,
    bound: str = "compute",
) -> float:
    """How many times faster `target` computes than `measured`: the ratio of dense bf16 rates
    (bound="compute") or of memory bandwidths (bound="memory")."""
    if bound not in ("compute", "memory"):
        raise GpkError(f"bound={bound!r} is not known; use 'compute' or 'memory'")
    a, b = device(measured), device(target)
    if bound == "compute":
        return b.flops / a.flops
    return b.memory_bandwidth_bytes_s / a.memory_bandwidth_bytes_s


def _preset(presets: Mapping[str, Any], name: str, what: str) -> Any:
    if name not in presets:
        known = ", ".join(repr(n) for n in presets)
        raise GpkError(f"{what} preset {name!r} is not known; use one of {known}, or a dict")
    return presets[name]


def _scaled(spec: Mapping[str, Any], stem: str, units: dict[str, float], required: bool) -> float:
    """The value of `stem + suffix` for the first suffix present, times that suffix's unit."""
    for suffix, unit in units.items():
        if stem + suffix in spec:
            return float(spec[stem + suffix]) * unit
    if required:
        keys = " or ".join(repr(stem + suffix) for suffix in units)
        raise GpkError(f"the dict {dict(spec)!r} has no {keys}; add one")
    return 0.0


# The GPU a link usually joins: NVLink 4 is the H100's, NVLink 3 the A100's; PCIe and networks
# join whatever the user has, taken as the H100 (the current part) unless `device=` says.
USUAL_DEVICE = {"nvlink4": "h100", "nvlink3": "a100"}
DEFAULT_DEVICE = "h100"


def usual_device(link: Interconnect) -> Device:
    """The GPU a projection onto `link` assumes when no `device=` is given."""
    return DEVICES[USUAL_DEVICE.get(link.name, DEFAULT_DEVICE)]
