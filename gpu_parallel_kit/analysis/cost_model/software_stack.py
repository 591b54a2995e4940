"""What a training software stack reaches on a GPU: the record the cost model times steps with.

The same plan on the same GPUs runs at different speeds under different training software
(docs/published-runs.md: six runs of one 530 B model on one plan shape need shares of peak from
0.48 to 0.72). A `SoftwareStack` holds what the step time asks of the software:

- the share of peak its matmuls reach by their shapes (`MatmulEfficiency`);
- how much of the data-parallel gradients' collectives it hides behind the backward, and of
  the tensor-parallel collectives behind compute;
- its fixed cost per step.

It has two sources. The published runs of one stack fit it (`planning/efficiency_fit.py`,
leave-one-out within the stack); `DeviceCalibration.as_stack()` measures it on the devices at
hand. `gpk.GPUCluster(..., stack=...)` picks one by name; without one a cluster takes the
newest stack the kit holds, or its calibration's own.

The stacks' parameters are kept here; `tests/planning/test_efficiency_fit.py` re-fits and
checks them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ...errors import GpkError
from .matmul_efficiency import MatmulEfficiency, Measured

if TYPE_CHECKING:
    from .model_card import ModelCard
    from .parallel_plan import Plan
    from .roofline import Efficiency

FP8 = "fp8"  # the precision whose matmuls run at the FP8 peak (`training_precision`)
# The backward's share of a step's compute, behind which data parallelism's gradients
# reduce as they come (Megatron-LM's and DeepSpeed's overlapped all-reduce).
BACKWARD_SHARE = 2 / 3


@dataclass(frozen=True)
class SoftwareStack:
    """A training software stack on one kind of GPU, as the step time asks of it.

    Args:
        name: how tables name it, e.g. "megatron-lm-2022".
        matmul: the share of peak its matmuls reach by shape in bf16, with the fit's band
            (None: no bf16 run fitted it).
        fp8: the same at the FP8 peak, for steps whose matmuls run in FP8 (None: not fitted).
        data_overlap: the share of a step's compute that data parallelism's gradient
            collectives hide behind (the backward's, 2/3, where they overlap it).
        tensor_overlap: the share of the tensor-parallel collectives hidden behind compute
            (0: all exposed, as Megatron-LM ran them before its communication overlap).
        step_fixed_s: seconds each step pays beyond its work (launch, optimizer, host).
        released: when the stack's runs were published, "YYYY-MM": the newest is the default.
        device: the GPU its runs ran on, or the calibrated devices.
        runs: the published runs it was fitted on (0 for a calibration).
        shapes: the distinct matmul shapes (`inverse_size`) among those runs: a stack fitted on
            one shape knows its share of peak there, not how it moves with shape.
        source: where its figures come from.
        calibrated: True for a stack measured on the devices at hand.
    """

    name: str
    matmul: MatmulEfficiency | None
    fp8: MatmulEfficiency | None = None
    data_overlap: float = BACKWARD_SHARE
    tensor_overlap: float = 0.0
    step_fixed_s: float = 0.0
    released: str = ""
    device: str = ""
    runs: int = 0
    shapes: int = 0
    source: str = ""
    calibrated: bool = False

    def __post_init__(self) -> None:
        for field in ("data_overlap", "tensor_overlap"):
            value = getattr(self, field)
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise GpkError(f"{field}={value} must lie in [0, 1]; e.g. 0.5")
        if not (math.isfinite(self.step_fixed_s) and self.step_fixed_s >= 0):
            raise GpkError(f"step_fixed_s={self.step_fixed_s} must be 0 or more seconds")

    def __repr__(self) -> str:
        return f"<SoftwareStack {self.name}: {self.said}>"

    @property
    def said(self) -> str:
        """What tables say of it: "megatron-lm-2022 (8 A100 runs, 2022-05)"."""
        if self.calibrated:
            return f"{self.name} (measured on {self.device})"
        when = f", {self.released}" if self.released else ""
        return f"{self.name} ({self.runs} {self.device} runs{when})"

    def for_plan(self, card: ModelCard, plan: Plan) -> Efficiency:
        """The share of peak a plan's step is timed at (`MatmulEfficiency.for_plan`): at the
        FP8 peak, its FP8 fit's; one sentence where the stack has none."""
        return self.matmul_at(card.precision).for_plan(card, plan)

    def matmul_at(self, precision: str) -> MatmulEfficiency:
        """Its matmul efficiency at `precision`'s peak; one sentence where none is fitted."""
        found = self.fp8 if precision == FP8 else self.matmul
        if found is None:
            other = "bf16" if precision == FP8 else FP8
            held = [s.name for s in STACKS.values() if s.fitted(precision)]
            raise GpkError(
                f"the stack {self.name!r} has no {precision} runs to say what share of the peak "
                f"it reaches; use precision={other!r}, or stack= one of "
                + ", ".join(map(repr, held))
            )
        return found

    def fitted(self, precision: str) -> bool:
        """Whether it says what share of `precision`'s peak its matmuls reach."""
        return (self.fp8 if precision == FP8 else self.matmul) is not None


def fit_stacks(
    points: Mapping[tuple[str, str], Sequence[Measured]], stacks: Mapping[str, SoftwareStack]
) -> dict[str, SoftwareStack]:
    """Each stack of `stacks` with its matmul efficiencies fitted on its own runs' `points`,
    keyed by (stack, precision), "bf16" or "fp8": one edge for every stack (the tiles, the same
    whatever the software), and each stack and precision its own share of peak for large
    matmuls, by least squares on 1/share = aₛ + b·H; each band the smallest and largest ratio
    of one of its runs' shares to its fit (of every run's, for a group of one run). A stack
    without points keeps its figures."""
    groups = {name: list(found) for name, found in points.items() if found}
    if not groups:
        raise GpkError("a fit of stacks needs at least one run")
    centred = [
        (p.inverse_size - _mean(g, _x), 1 / p.share - _mean(g, _y))
        for g in groups.values()
        for p in g
    ]
    spread = math.fsum(x * x for x, _ in centred)
    slope = math.fsum(x * y for x, y in centred) / spread if spread > 0 else 0.0
    shapes = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    for key, group in groups.items():
        intercept = _mean(group, _y) - slope * _mean(group, _x)
        if not intercept > 0:
            raise GpkError(f"the runs of {key[0]} give no share of peak for large matmuls")
        peak_share = min(1.0, 1 / intercept)
        shapes[key] = MatmulEfficiency(peak_share, max(0.0, slope * peak_share))
        ratios[key] = [p.share / shapes[key].share(p.inverse_size) for p in group]
    pooled = [r for found in ratios.values() for r in found]
    fitted = dict(stacks)
    runs: dict[str, int] = {}
    seen: dict[str, set[float]] = {}
    for key, group in groups.items():
        name, precision = key
        # One run says nothing of its group's spread: it takes every run's.
        spread = ratios[key] if len(group) > 1 else pooled
        source = f"fitted on {len(group)} published {precision} runs of {name}"
        matmul = MatmulEfficiency(
            shapes[key].peak_share, shapes[key].edge, min(1.0, *spread), max(1.0, *spread),
            source,
        )  # fmt: skip
        field = "fp8" if precision == FP8 else "matmul"
        runs[name] = runs.get(name, 0) + len(group)
        seen.setdefault(name, set()).update(round(p.inverse_size, 9) for p in group)
        fitted[name] = replace(
            fitted[name], **{field: matmul}, runs=runs[name], shapes=len(seen[name])
        )
    return fitted


def _x(point: Measured) -> float:
    return point.inverse_size


def _y(point: Measured) -> float:
    return 1 / point.share


def _mean(points: Sequence[Measured], of: object) -> float:
    return math.fsum(of(p) for p in points) / len(points)  # type: ignore[operator]


# Fitted on the published runs of docs/published-runs.md by `planning/efficiency_fit.stacks`;
# tests/planning/test_efficiency_fit.py re-fits and checks them.
STACKS: dict[str, SoftwareStack] = {
    stack.name: stack
    for stack in (
        SoftwareStack(
            "megatron-lm-2021",
            MatmulEfficiency(0.6924, 99.34, 0.930, 1.062, "fitted on 10 published bf16 runs"),
            released="2021-04",
            device="A100",
            runs=10,
            shapes=10,
            source="Narayanan et al., SC 2021: Megatron-LM of 2021 on Selene",
        ),
        SoftwareStack(
            "megatron-lm-2022",
            MatmulEfficiency(0.7648, 109.72, 0.871, 1.080, "fitted on 8 published bf16 runs"),
            released="2022-05",
            device="A100",
            runs=8,
            shapes=4,
            source="Korthikanti et al., MLSys 2023: Megatron-LM of 2022 on Selene",
        ),
        SoftwareStack(
            "deepspeed-megatron-2021",
            MatmulEfficiency(0.5447, 78.14, 0.975, 1.020, "fitted on 3 published bf16 runs"),
            released="2022-01",
            device="A100",
            runs=3,
            shapes=1,
            source="Smith et al., 2022: MT-NLG's DeepSpeed with Megatron-LM on Selene",
        ),
        SoftwareStack(
            "megatron-deepspeed-bloom",
            MatmulEfficiency(0.6065, 87.00, 0.865, 1.196, "fitted on 1 published bf16 run"),
            released="2022-11",
            device="A100",
            runs=1,
            shapes=1,
            source="BigScience, 2022: BLOOM's Megatron-DeepSpeed on Jean Zay",
        ),
        SoftwareStack(
            "nemo-24.03",
            None,
            MatmulEfficiency(0.4803, 68.91, 0.923, 1.056, "fitted on 9 published fp8 runs"),
            released="2024-03",
            device="H100",
            runs=9,
            shapes=9,
            source="NeMo's long-sequence table: NeMo 24.03.01 on DGX H100, Llama 2 7B, 4K-1M",
        ),
        SoftwareStack(
            "nemo-24.05",
            MatmulEfficiency(0.5990, 85.93, 0.989, 1.010, "fitted on 5 published bf16 runs"),
            MatmulEfficiency(0.4369, 62.67, 0.924, 1.064, "fitted on 5 published fp8 runs"),
            released="2024-05",
            device="H100",
            runs=10,
            shapes=1,
            source="NVIDIA's DGX Cloud Benchmarking v24.11.1: NeMo 24.05 on DGX H100",
        ),
        SoftwareStack(
            "nemo-24.07",
            None,
            MatmulEfficiency(0.4931, 70.75, 0.868, 1.145, "fitted on 5 published fp8 runs"),
            released="2024-07",
            device="H100",
            runs=5,
            shapes=5,
            source="NeMo's performance summary: NeMo 24.07 on DGX H100",
        ),
        SoftwareStack(
            "nemo-24.09",
            MatmulEfficiency(0.6724, 96.46, 0.919, 1.117, "fitted on 8 published bf16 runs"),
            MatmulEfficiency(0.5138, 73.71, 0.866, 1.192, "fitted on 8 published fp8 runs"),
            released="2024-09",
            device="H100",
            runs=16,
            shapes=2,
            source="NVIDIA's DGX Cloud Benchmarking v24.11.1: NeMo 24.09 on DGX H100",
        ),
        SoftwareStack(
            "nemo-24.12",
            MatmulEfficiency(0.6785, 97.33, 0.949, 1.086, "fitted on 8 published bf16 runs"),
            MatmulEfficiency(0.5273, 75.64, 0.884, 1.196, "fitted on 8 published fp8 runs"),
            released="2024-12",
            device="H100",
            runs=16,
            shapes=2,
            source="NVIDIA's DGX Cloud Benchmarking v25.02.01: NeMo 24.12 on DGX H100",
        ),
        SoftwareStack(
            "megatron-bridge-25.11",
            None,
            MatmulEfficiency(0.5403, 77.52, 0.956, 1.054, "fitted on 4 published fp8 runs"),
            released="2025-11",
            device="H100",
            runs=4,
            shapes=4,
            source="Megatron-Bridge's performance archive: NeMo 25.11 on DGX H100",
        ),
        SoftwareStack(
            "megatron-bridge-26.02",
            None,
            MatmulEfficiency(0.5803, 83.26, 0.983, 1.032, "fitted on 5 published fp8 runs"),
            released="2026-02",
            device="H100",
            runs=5,
            shapes=3,
            source="Megatron-Bridge's performance archive: NeMo 26.02 and 26.02.01 on DGX H100",
        ),
        SoftwareStack(
            "megatron-bridge-26.04",
            None,
            MatmulEfficiency(0.5849, 83.90, 0.865, 1.194, "fitted on 7 published fp8 runs"),
            released="2026-04",
            device="H100",
            runs=7,
            shapes=4,
            source="Megatron-Bridge's performance archive: NeMo 26.04 and 26.04.01 on DGX H100",
        ),
        SoftwareStack(
            "megatron-bridge-26.06",
            None,
            MatmulEfficiency(0.5277, 75.70, 0.911, 1.140, "fitted on 2 published fp8 runs"),
            released="2026-06",
            device="H100",
            runs=2,
            shapes=2,
            source="Megatron-Bridge's performance archive: NeMo 26.06 on DGX H100",
        ),
        SoftwareStack(
            "maxtext-2024.12",
            MatmulEfficiency(0.9334, 133.91, 0.987, 1.010, "fitted on 6 published bf16 runs"),
            MatmulEfficiency(0.7390, 106.02, 0.939, 1.146, "fitted on 6 published fp8 runs"),
            released="2024-12",
            device="H100",
            runs=12,
            shapes=1,
            source="NVIDIA's DGX Cloud Benchmarking v24.11.1: MaxText on JAX "
            "(jax:maxtext-2024-12-09) on DGX H100",
        ),
        SoftwareStack(
            "maxtext-25.01",
            MatmulEfficiency(0.8662, 124.26, 0.982, 1.011, "fitted on 5 published bf16 runs"),
            MatmulEfficiency(0.7533, 108.06, 0.979, 1.030, "fitted on 5 published fp8 runs"),
            released="2025-01",
            device="H100",
            runs=10,
            shapes=1,
            source="NVIDIA's DGX Cloud Benchmarking v25.02.01: MaxText on JAX "
            "(jax:25.01-maxtext) on DGX H100",
        ),
    )
}


def newest_stack(
    stacks: Mapping[str, SoftwareStack] | None = None, precision: str = "bf16"
) -> SoftwareStack:
    """The stack released last, fitted at `precision` on runs of several matmul shapes: the
    default for a cluster that names none. (A stack fitted on one model's runs of one shape,
    such as MaxText's, says its share of peak there only.)"""
    held = [s for s in (stacks or STACKS).values() if s.shapes > 1 and s.fitted(precision)]
    return max(held, key=lambda s: s.released)


def software_stack(stack: str | SoftwareStack | None) -> SoftwareStack:
    """A stack by name (or as given); None: the newest. One sentence for an unknown name."""
    if stack is None:
        return newest_stack()
    if isinstance(stack, SoftwareStack):
        return stack
    if isinstance(stack, str) and stack in STACKS:
        return STACKS[stack]
    raise GpkError(
        f"stack={stack!r} is not one the kit holds; use one of "
        + ", ".join(repr(name) for name in STACKS)
        + ", or a calibration's own (gpk.GPUCluster(device=calibration))"
    )
