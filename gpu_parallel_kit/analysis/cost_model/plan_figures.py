"""What a plan's cost model answers, as typed values: its step's seconds by part and what
bounds it (`StepTime`), and its bytes on the fullest device by part (`MemoryByPart`).

The search's table keeps them as flat columns (`columns()`: "step_time_s", "comm:tensor_s",
"params_bytes", ...), in the order the table shows them; everything between the cost model
and the table passes the records.
"""

from __future__ import annotations

from dataclasses import dataclass

# What each compute term names as the bound when it rules the compute part.
COMPUTE_BOUNDS = {
    "flops": "compute",
    "memory_bandwidth": "memory-bandwidth",
    "launches": "launches",
    "attention_scores": "attention-scores",
}


@dataclass(frozen=True)
class StepParts:
    """Where a step's seconds go on its busiest device, at the efficiency's likely end.

    Args:
        compute: the roofline's compute (`ComputeTerms`'s largest, at the efficiency), and
            attention as written's passes over its scores.
        tensor, context, expert: the tensor, context and expert axes' collectives.
        data: the data axis's collectives the compute does not hide.
        stages: a pipeline's sends it cannot hide (its fill and drain).
        bubble: a pipeline's idle time.
    """

    compute: float
    tensor: float = 0.0
    context: float = 0.0
    expert: float = 0.0
    data: float = 0.0
    stages: float = 0.0
    bubble: float = 0.0

    def columns(self) -> dict[str, float]:
        """The parts as a table's columns, in `PART_COLUMNS`' order."""
        return {
            "compute_s": self.compute,
            "comm:tensor_s": self.tensor,
            "comm:context_s": self.context,
            "comm:expert_s": self.expert,
            "comm:data_s": self.data,
            "comm:stages_s": self.stages,
            "bubble_s": self.bubble,
        }


@dataclass(frozen=True)
class ComputeTerms:
    """The compute part's terms on the busiest device over the step, in seconds: the FLOPs
    and the bytes at the efficiency's likely end and the kernels' launch floor, of which the
    compute is the largest, plus attention as written's passes over its scores at the memory's
    bandwidth (0 under a fused kernel)."""

    flops: float
    memory_bandwidth: float
    launches: float
    attention_scores: float = 0.0

    def columns(self) -> dict[str, float]:
        return {
            "flops_s": self.flops,
            "memory-bandwidth_s": self.memory_bandwidth,
            "launches_s": self.launches,
            "attention-scores_s": self.attention_scores,
        }


@dataclass(frozen=True)
class StepTime:
    """A plan's training step: its seconds at the efficiency band's likely, low and high ends,
    where they go, and the throughput it gives.

    Args:
        likely: the step at the band's likely efficiency.
        short, long: the step at the band's high and low efficiency.
        parts: where the likely step goes.
        terms: the compute part's terms.
        throughput_samples_s: samples a second over the cluster.
        model_tflops_per_device: the model's FLOPs a second on each device.
        mfu: the model FLOPs' share of the device's peak.
    """

    likely: float
    short: float
    long: float
    parts: StepParts
    terms: ComputeTerms
    throughput_samples_s: float = 0.0
    model_tflops_per_device: float = 0.0
    mfu: float = 0.0

    @property
    def bound(self) -> str:
        """What bounds the step: its largest part, the compute part named by the term that
        rules it ("compute" for the FLOPs, "memory-bandwidth", "launches")."""
        return bound(self.columns())

    def columns(self) -> dict[str, float | str]:
        """The step as a table row's columns."""
        row: dict[str, float | str] = {
            "step_time_s": self.likely,
            "throughput_samples_s": self.throughput_samples_s,
            "step_time_low_s": self.short,
            "step_time_high_s": self.long,
            "model_tflops_per_device": self.model_tflops_per_device,
            "mfu": self.mfu,
            **self.parts.columns(),
            **self.terms.columns(),
        }
        return {**row, "bound": bound(row)}


PART_COLUMNS = tuple(StepParts(0.0).columns())
_TERM_COLUMNS = dict(zip(ComputeTerms(0, 0, 0).columns(), COMPUTE_BOUNDS.values(), strict=True))


def bound(row: dict[str, float | str]) -> str:
    """What bounds a table row's step (`StepTime.bound`): its largest part (a tie goes to the
    first in `PART_COLUMNS`' order), the compute part named by its largest term."""
    largest = max(PART_COLUMNS, key=row.__getitem__)
    if largest != "compute_s":
        return largest[: -len("_s")]
    return _TERM_COLUMNS[max(_TERM_COLUMNS, key=lambda term: row.get(term, 0.0))]


@dataclass(frozen=True)
class MemoryByPart:
    """Bytes on one device by part: its parameters, gradients and optimizer state, and the
    activations it keeps for the backward."""

    params: float
    grads: float
    optimizer: float
    activations: float = 0.0

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations

    def __add__(self, other: MemoryByPart) -> MemoryByPart:
        return MemoryByPart(
            self.params + other.params,
            self.grads + other.grads,
            self.optimizer + other.optimizer,
            self.activations + other.activations,
        )

    def columns(self) -> dict[str, float]:
        """The parts as a table's columns."""
        return {
            "params_bytes": self.params,
            "grads_bytes": self.grads,
            "optimizer_bytes": self.optimizer,
            "activations_bytes": self.activations,
        }
