"""The counted work of one training step: FLOPs and bytes, per sample and per step.

A count (`worker/work_count.py`) is made at two batch sizes b₁ < b₂ so that it splits into what
grows with the batch and what a step costs whatever its batch::

    flops(b) = F₁ · b + F₀        F₁ = (flops(b₂) - flops(b₁)) / (b₂ - b₁)
    bytes(b) = B₁ · b + B₀        (the same for bytes accessed)

F₀ and B₀ are the optimizer update and the weights read once per step; F₁ and B₁ are forward and
backward per sample. `kernels` counts the compiled step's launching instructions (fusions, dots,
convolutions), the basis of the launch floor. Pure data: no TensorFlow, no JAX.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ...errors import GpkError


@dataclass(frozen=True)
class LayerWork:
    """One layer call's forward work per sample, as the compiler counted it alone."""

    name: str
    kind: str  # the Keras class, e.g. "Dense"
    forward_flops: float  # per sample
    forward_bytes: float  # per sample
    parameters: int  # trainable elements


@dataclass(frozen=True)
class WorkCount:
    """A training step's work, split into a part per sample and a part per step."""

    source: str  # what counted it, e.g. "xla cost analysis (jax)"
    flops_per_sample: float  # F₁: forward + backward per sample
    flops_per_step: float  # F₀: per step whatever the batch (the optimizer update)
    bytes_per_sample: float  # B₁; 0 when the source counts no bytes
    bytes_per_step: float  # B₀
    kernels: int = 0  # launching instructions of the compiled step; 0: not counted
    parameters: int = 0  # trainable elements
    batches: tuple[int, int] = (0, 0)  # the two batch sizes counted
    count_s: float = 0.0  # what counting cost, compiling included
    layers: tuple[LayerWork, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for name in ("flops_per_sample", "flops_per_step", "bytes_per_sample", "bytes_per_step"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise GpkError(f"{name}={value} is not a count; give a finite number, 0 or more")
        if not self.flops_per_sample > 0:
            raise GpkError(
                f"the count from {self.source} has no FLOPs per sample; the step cannot be counted"
            )

    def __repr__(self) -> str:
        return (
            f"<WorkCount {self.flops_per_sample / 1e9:.4g} GFLOP and "
            f"{self.bytes_per_sample / 1e6:.4g} MB per sample, {self.kernels} kernels "
            f"({self.source})>"
        )

    @property
    def forward_flops_per_sample(self) -> float:
        """The layers' forward count when known, else a third of the step's (backward ≈ 2 ×)."""
        counted = math.fsum(layer.forward_flops for layer in self.layers)
        return counted if counted > 0 else self.flops_per_sample / 3

    def flops(self, batch: float) -> float:
        return self.flops_per_sample * batch + self.flops_per_step

    def bytes(self, batch: float) -> float:
        return self.bytes_per_sample * batch + self.bytes_per_step

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkCount:
        values = dict(data)
        values["layers"] = tuple(LayerWork(**layer) for layer in values.get("layers", ()))
        values["batches"] = tuple(values.get("batches", (0, 0)))
        return cls(**values)


def from_counts(counted: Mapping[str, Any]) -> WorkCount:
    """The `WorkCount` of what the counting child sent: two steps at two batches, the layers."""
    steps = sorted(counted.get("steps", []), key=lambda s: s["batch"])
    if len(steps) != 2 or steps[0]["batch"] >= steps[1]["batch"]:
        raise GpkError(f"a count needs the step at two batch sizes, not {steps!r}")
    small, large = steps
    b1, b2 = small["batch"], large["batch"]

    def split(key: str) -> tuple[float, float]:
        per_sample = (large[key] - small[key]) / (b2 - b1)
        # The compiler may pick another algorithm at another batch: never a negative part.
        return max(per_sample, 0.0), max(small[key] - per_sample * b1, 0.0)

    flops_sample, flops_step = split("flops")
    bytes_sample, bytes_step = split("bytes")
    return WorkCount(
        source=str(counted.get("source", "")),
        flops_per_sample=flops_sample,
        flops_per_step=flops_step,
        bytes_per_sample=bytes_sample,
        bytes_per_step=bytes_step,
        kernels=int(max(small.get("kernels", 0), large.get("kernels", 0))),
        parameters=int(counted.get("parameters", 0)),
        batches=(b1, b2),
        count_s=float(counted.get("count_s", 0.0)),
        layers=tuple(LayerWork(**layer) for layer in counted.get("layers", [])),
    )
