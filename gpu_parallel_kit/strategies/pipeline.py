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
from ..pipeline.schedules import SCHEDULES, check_plan, default_schedule, default_virtual_stages
from .option import Option, balance, positive
from .option import micro_batches as micro_batch_count
from .plan_axes import STAGES
from .record import Strategy

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec


PIPELINE_OPTIONS = (
    Option(
        "schedule",
        str,
        None,
        "naive (one batch, stage after stage), gpipe (all forwards, then all backwards), 1f1b "
        "(fewer activations held), interleaved (several model chunks per device, a smaller "
        "bubble) or zb-h1 (the backward split, weight gradients filling the bubble); default: "
        "naive, or gpipe when micro-batches are asked",
        choices=SCHEDULES,
        absent="",
    ),
    Option(
        "micro_batches",
        micro_batch_count,
        None,
        "micro-batches per global batch, or auto (the run picks M); default: 1",
        metavar="M|auto",
    ),
    Option(
        "balance",
        balance,
        "params",
        "cut the model's graph into stages of equal parameter count (params) or equal measured "
        "time (time), sending few bytes across the cuts, or begin stages 1.. at the given layer "
        "indices (3,6) or layer names (conv4_block1_out)",
        metavar="params|time|I,J|NAMES",
    ),
    Option(
        "virtual_stages",
        positive,
        None,
        "interleaved: model chunks each device holds (the bubble shrinks v times, the "
        "transfers grow v times); default: 2 with the interleaved schedule",
        metavar="V",
        absent=1,
    ),
    Option(
        "recompute",
        bool,
        True,
        "compiled stage tasks whose backward recomputes the forward; off: each forward keeps "
        "what its backward needs (TensorFlow: eager tasks and their tape; JAX: the VJP)",
    ),
)


def pipeline_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """naive without micro-batches, gpipe when micro-batches (or "auto") are asked."""
    schedule = options.get("schedule")
    micro_batches = options.get("micro_batches")
    if schedule is None:
        schedule = default_schedule(micro_batches)
    balance = options.get("balance", "params")
    return {
        "schedule": schedule,
        "micro_batches": 1 if micro_batches is None else micro_batches,
        "balance": list(balance) if isinstance(balance, tuple) else balance,
        "recompute": options.get("recompute", True),
        # Interleaved puts two model chunks on each device unless told otherwise.
        "virtual_stages": options.get("virtual_stages") or default_virtual_stages(schedule),
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
    worker_classes={
        "tensorflow": "gpu_parallel_kit.worker.tensorflow.engines.pipeline_engine:PipelineEngine",
        "jax": "gpu_parallel_kit.worker.jax.pipeline.pipeline_strategy:PipelineParallel",
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
    options=PIPELINE_OPTIONS,
    plan=pipeline_options,
    check=check_pipeline,
    label=_label,
    projector="gpu_parallel_kit.analysis.cost_model.strategy_projectors:project_pipeline",
    plan_axis=STAGES,
)

DATA_PIPELINE = Strategy(
    name="data+pipeline",
    summary="copies of a pipeline, each stage's gradients all-reduced between the copies",
    aliases=("data+model",),
    runnable=False,
    all_reduce=True,
    stages=True,
    color="tab:red",
    projector="gpu_parallel_kit.analysis.cost_model.strategy_projectors:project_data_pipeline",
)
