"""`pipeline` (the seed's "model parallelism"; `model` is its alias): the model's graph cut into
stages on different devices, micro-batches run by a schedule (naive, gpipe, 1f1b, interleaved,
zb-h1), with the gradients of single-device training.

>>> exp.run(strategy="pipeline", devices=2, schedule="1f1b", micro_batches=4)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import GpkError
from ..pipeline.microbatch import candidates, check_micro_batches, is_auto
from ..pipeline.schedules import (
    SCHEDULES,
    check_plan,
    default_schedule,
    default_virtual_stages,
    schedule_record,
)
from .long_sequences import SEQUENCE_PARALLEL, check_sequence_split, sequence_options
from .option import Option, balance, positive
from .option import micro_batches as micro_batch_count
from .plan_axes import STAGES, mesh_label
from .processes import WORKERS, workers_option
from .record import GridCell, Strategy
from .tensor import LAYOUT_MAP, MESH, check_layout_map, check_mesh

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
    Option(
        "stages",
        positive,
        None,
        "stages the model is cut into; default: devices ÷ (data × model) of the mesh, or every "
        "device",
        metavar="K",
    ),
    MESH,
    LAYOUT_MAP,
    SEQUENCE_PARALLEL,
    WORKERS,
)


def pipeline_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """naive without micro-batches, gpipe when micro-batches (or "auto") are asked."""
    schedule = options.get("schedule")
    micro_batches = options.get("micro_batches")
    mesh = options.get("mesh")
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
        # Each stage on a (data, model) sub-mesh (JAX): its layers split as `tensor` splits them.
        "mesh": None if mesh is None else tuple(mesh),
        "layout_map": check_layout_map(options.get("layout_map")),
        "stages": options.get("stages"),
        # Each stage's norms split along the sequence over its mesh's model axis (JAX).
        "sequence_parallel": sequence_options(options)["sequence_parallel"],
        **workers_option(options),
    }


class StageMesh(NamedTuple):
    """A pipeline's devices as stages, each on a (data, model) sub-mesh of its own."""

    stages: int
    data: int  # each stage's replicas, each with its share of the micro-batch
    model: int  # each stage's devices its layers' weights are split over


def stage_mesh(mesh: Any, devices: int, stages: int | None = None) -> StageMesh:
    """(stages, data, model): the devices as stages of (data, model) sub-meshes; without a
    mesh, one device per stage."""
    if mesh is None:
        data = model = 1
    else:
        data, model = check_mesh(mesh, data_model(mesh))
    per_stage = data * model
    if devices % per_stage:
        raise GpkError(
            f"mesh={(data, model)} puts {per_stage} devices in each stage, which does not divide "
            f"the run's {devices}; use devices={per_stage * max(2, devices // per_stage)} or a "
            "mesh whose data × model divides the devices"
        )
    whole = devices // per_stage
    if stages is not None and stages != whole:
        raise GpkError(
            f"stages={stages} of {per_stage} device(s) each need {stages * per_stage} devices but "
            f"the run has {devices}; use devices={stages * per_stage} or stages={whole}"
        )
    return StageMesh(whole, data, model)


def data_model(mesh: Any) -> int:
    """The devices of a (data, model) pair, for its own check (which says what is wrong)."""
    try:
        return int(mesh[0]) * int(mesh[1])
    except (TypeError, ValueError, IndexError):
        return 0


def check_pipeline(spec: RunSpec) -> None:
    """A known schedule, a mesh that divides the devices into stages, and micro-batches that
    split the global batch (and each micro-batch over the mesh's data axis) and suit it."""
    if spec.schedule not in SCHEDULES:
        raise GpkError(
            f"schedule={spec.schedule!r} is not known; use one of {', '.join(SCHEDULES)}"
        )
    if spec.workers > 1:
        check_over_processes(spec)
    stages, data, model = stage_mesh(spec.mesh, spec.replicas, spec.options.get("stages"))
    if spec.mesh is not None:
        spec.options["mesh"] = (data, model)
    spec.options["stages"] = stages
    spec.options["layout_map"] = check_layout_map(spec.layout_map)
    check_sequence_split(spec, data, model)
    m = check_micro_batches(spec.micro_batches)
    if is_auto(m) and data > 1:
        raise GpkError(
            f"micro_batches='auto' times micro-batches of every size, and those of one sample "
            f"cannot split over the mesh's data axis of {data}; give micro_batches a number, "
            "e.g. micro_batches=4"
        )
    if is_auto(m):
        # The worker measures the curve and picks among these; none fitting is said here.
        candidates(spec.schedule, stages, spec.global_batch // data, spec.virtual_stages)
        return
    # naive with M > 1, interleaved with M not a multiple of K, ... are refused here
    check_plan(spec.schedule, stages, m, spec.virtual_stages)
    if spec.global_batch % (m * data):
        parts = m * data
        lower = spec.global_batch - spec.global_batch % parts
        over = f" of {data} samples' shares each (the mesh's data axis)" if data > 1 else ""
        raise GpkError(
            f"batch_size={spec.global_batch} does not split into {m} micro-batches{over}; use a "
            f"multiple of {parts}, e.g. {lower or parts} or {lower + parts}"
        )


def check_over_processes(spec: RunSpec) -> None:
    """Every process cuts the model and splits the batch alike: nothing is chosen from one
    process's own timings."""
    if is_auto(spec.micro_batches):
        raise GpkError(
            f"micro_batches='auto' picks M from timings each of the {spec.workers} workers "
            "would measure apart; give micro_batches a number, e.g. micro_batches=4"
        )
    if spec.balance == "time":
        raise GpkError(
            f"balance='time' cuts the model where timings each of the {spec.workers} workers "
            "would measure apart fall; use balance='params' or name the cuts"
        )


def _in_grid(cell: GridCell) -> bool:
    # A mesh of (data, model) runs on device counts it divides into two or more stages.
    mesh = cell.plan.get("mesh")
    if mesh is None:
        return True
    per_stage = data_model(mesh)
    return per_stage > 0 and cell.count % per_stage == 0 and cell.count // per_stage > 1


def one_call_steps(spec: RunSpec) -> bool:
    """One stage on one device in one process, one micro-batch: each step is a single call of
    that stage (its forward, backward and update), and several steps can share a call, as
    `fit` runs them with steps_per_execution."""
    one_part = not schedule_record(spec.schedule).micro_batches or spec.micro_batches in (None, 1)
    alone = spec.replicas == 1 and spec.workers == 1 and spec.options.get("stages", 1) == 1
    return alone and spec.virtual_stages == 1 and one_part


def _label(spec: RunSpec) -> str:
    label = f"{spec.strategy}×{spec.replicas} {spec.schedule}"
    if is_auto(spec.micro_batches):
        label += " M=auto"
    elif spec.micro_batches and spec.micro_batches > 1:
        label += f" M={spec.micro_batches}"
    if spec.mesh is not None:
        data, model = spec.mesh
        label += f" ({mesh_label(data=data, tensor=model, stages=spec.stages)})"
    return label


PIPELINE = Strategy(
    name="pipeline",
    predictor="gpu_parallel_kit.analysis.cost_model.calibrated_step:predict_pipeline",
    summary="the model's graph cut into stages on devices, micro-batches run by a schedule",
    aliases=("model",),
    worker_classes={
        "tensorflow": (
            "gpu_parallel_kit.worker.tensorflow.pipeline.pipeline_strategy:PipelineEngine"
        ),
        "jax": "gpu_parallel_kit.worker.jax.pipeline.pipeline_strategy:PipelineParallel",
    },
    stages=True,
    splits_state=True,
    # Stages in the processes of their devices, the cuts between them crossed by ppermute.
    over_processes=frozenset({"jax"}),
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
    steps_together=one_call_steps,
    rounds_in_process=True,
    in_grid=_in_grid,
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
