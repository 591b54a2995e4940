"""What a calibration's probe measures on the devices at hand: its shapes, sizes and time.

The caller builds a `ProbePlan` (`gpk.calibrate`, `analysis/cost_model/device_calibration.py`)
and hands it to a worker child per busy device count (`worker/jax/device_probe.py`,
`worker/tensorflow/device_probe.py`), which answers with plain lists of points. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Square matrix products n × n · n × n per device: from a small model's layers to what saturates
# a CPU core's caches; a model's own shapes are added to these.
MATMUL_SIZES = (32, 64, 128, 256, 512)
# Elements per device of a chain of elementwise updates: from a launch's fixed cost to memory.
ELEMENTWISE_SIZES = (1 << 8, 1 << 12, 1 << 16, 1 << 19, 1 << 21)
# Bytes per device of each collective: from its latency to its bandwidth.
MESSAGE_BYTES = (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_receive")


@dataclass(frozen=True)
class MatmulShape:
    """One matrix product to time, per device: (m × k) · (k × n)."""

    m: int
    k: int
    n: int

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n


@dataclass(frozen=True)
class ProbePlan:
    """What one probing child measures with `devices` devices busy at once, in `budget_s`."""

    devices: int
    budget_s: float
    matmuls: tuple[MatmulShape, ...] = field(
        default_factory=lambda: tuple(MatmulShape(n, n, n) for n in MATMUL_SIZES)
    )
    elementwise: tuple[int, ...] = ELEMENTWISE_SIZES
    message_bytes: tuple[int, ...] = MESSAGE_BYTES
    collectives: tuple[str, ...] = COLLECTIVES
