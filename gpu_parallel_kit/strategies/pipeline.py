"""`pipeline` (the seed's "model parallelism"; `model` is its alias): the model's graph cut into
stages on different devices, micro-batches run by a schedule (naive, gpipe, 1f1b, interleaved,
zb-h1), with the gradients of single-device training.

>>> exp.run(strategy="pipeline", devices=2, schedule="1f1b", micro_batches=4)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import GpkError
from ..pipeline.microbatch import candidates, check_micro_batches, is_auto
from ..pipeline.schedules import SCHEDULES, check_plan
from .record import Strategy

if TYPE_CHECKING:
    from ..runs.spec import RunSpec


def pipeline_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """naive without micro-batches, gpipe when micro-batches (or "auto") are asked."""
    schedule = options.get("schedule")
    micro_batches = options.get("micro_batches")
    if schedule is None:
        schedule = "gpipe" if micro_batches not in (None, 1) else "naive"
    balance = options.get("balance", "params")
    return {
        "schedule": schedule,
        "micro_batches": 1 if micro_batches is None else micro_batches,
        "balance": list(balance) if isinstance(balance, tuple) else balance,
        "recompute": options.get("recompute", True),
        # Interleaved puts two model chunks on each device unless told otherwise.
        "virtual_stages": options.get("virtual_stages") or (2 if schedule == "interleaved" else 1),
    }


def check_pipeline(spec: RunSpec) -> None:
    """A known schedule, and micro-batches that split the global batch and suit it."""
    if spec.schedule not in SCHEDULES:
        raise GpkError(
            f"schedule={spec.schedule!r} is not known; use one of {', '.join(SCHEDULES)}"
        )
    m = check_micro_batches(spec.micro_batches)
    if is_auto(m):
        # The worker measures the curve and picks among these; none fitting is said here.
        candidates(spec.schedule, spec.devices.count, spec.global_batch, spec.virtual_stages)
        return
    # naive with M > 1, interleaved with M not a multiple of K, ... are refused here
    check_plan(spec.schedule, spec.devices.count, m, spec.virtual_stages)
    if spec.global_batch % m:
        lower = spec.global_batch - spec.global_batch % m
        raise GpkError(
            f"batch_size={spec.global_batch} does not split into {m} micro-batches; use a "
            f"multiple of {m}, e.g. {lower or m} or {lower + m}"
        )


def _label(spec: RunSpec) -> str:
    label = f"{spec.strategy}×{spec.devices.count} {spec.schedule}"
    if is_auto(spec.micro_batches):
        label += " M=auto"
    elif spec.micro_batches and spec.micro_batches > 1:
        label += f" M={spec.micro_batches}"
    return label


PIPELINE = Strategy(
    name="pipeline",
    summary="the model's graph cut into stages on devices, micro-batches run by a schedule",
    aliases=("model",),
    workers={
        "tensorflow": "gpu_parallel_kit.worker.tensorflow.engines.model:ModelParallelEngine",
    },
    missing={
        "jax": (
            "the kit's pipeline stages run on TensorFlow devices; use backend='tensorflow', or "
            "strategy='tensor' to split layers over devices on JAX"
        ),
    },
    stages=True,
    splits_state=True,
    color="tab:orange",
    columns=(
        "schedule",
        "micro_batches",
        "bubble_fraction",
        "bubble_theoretical",
        "state_bytes",
        "peak_activation_bytes",
    ),
    plan=pipeline_options,
    check=check_pipeline,
    label=_label,
    projector="gpu_parallel_kit.analysis.projectors:project_pipeline",
)

DATA_PIPELINE = Strategy(
    name="data+pipeline",
    summary="copies of a pipeline, each stage's gradients all-reduced between the copies",
    aliases=("data+model",),
    runnable=False,
    all_reduce=True,
    stages=True,
    color="tab:red",
    projector="gpu_parallel_kit.analysis.projectors:project_data_pipeline",
)
