"""A searched plan's shape, scaled down to run here: which strategy, on how many devices, with
which options, and what was scaled to get there.

The plan keeps its tensor and stages where the devices here allow, and gives up replicas (its
data axis). A plan with both a tensor axis and stages runs once the pipeline's record takes a
mesh (each stage on a (data, tensor) sub-mesh), and is refused in one sentence until then. Each
axis is run by the strategy whose record names it (`Strategy.plan_axis`, and `plan_sharding` for
the data axis's sharding); a sharding no record trains (zero-1, zero-2) runs as whole replicas,
and the shape says so. A mixture of experts' expert axis runs as `expert` on a (data, expert)
mesh where the plan has neither a tensor axis nor stages, and its experts stay whole beside them.
Pure logic: `Experiment.run_plan` asks it.

>>> plan = dict(data=16, tensor=8, stages=1, sharding="zero-1", micro_batch_size=1,
...             micro_batches=32, schedule="-", virtual_stages=1, checkpointing="none")
>>> scaled = scale_plan(plan, devices=8, batch=16, backend="jax")
>>> scaled.strategy, scaled.options["mesh"], scaled.scaled[0]
('tensor', (1, 8), 'data 16 -> 1')
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ..analysis.cost_model.parallel_plan import Plan
from ..backends import backend as backend_record
from ..errors import GpkError, whole_number
from ..pipeline.schedules import check_plan
from ..strategies import runnable
from ..strategies.plan_axes import DATA, EXPERT, PLAN_AXES, STAGES, TENSOR
from ..strategies.record import Strategy

PLAN_FIELDS = tuple(f.name for f in fields(Plan))  # data, tensor, stages, sharding, ...
MIN_BLOCKS = 2  # a scaled model keeps at least two blocks, so blocks still follow blocks
RECOMPUTE = "recompute"  # the option of a strategy whose backward recomputes its forward
MESH = "mesh"  # the option of a strategy laid out on a (data, model) mesh
CONTEXT, SEQUENCE_PARALLEL, CHECKPOINTING = "context", "sequence_parallel", "checkpointing"
NO_CHECKPOINTING = "none"  # the plan search's word for keeping every activation
FULL_CHECKPOINTING = "full"  # the one recomputation a strategy's `recompute` runs
DEFAULTS = {f.name: f.default for f in fields(Plan) if f.default is not MISSING}
NOT_NUMBERS = ("sequence_parallel", "stage_blocks")


@dataclass(frozen=True)
class ScaledPlan:
    """One plan's shape as it runs here.

    Args:
        strategy: the strategy that runs it.
        devices: devices here.
        backend: the backend that runs it.
        options: the strategy's options (`mesh`, `schedule`, `micro_batches`, ...).
        shape: the plan's fields as they run here (`data`, `tensor`, `stages`, ...).
        blocks: the blocks the model is rebuilt with; None keeps the model as it is.
        scaled: what changed, one phrase each ("data 64 -> 2", "blocks 40 -> 4").
    """

    strategy: str
    devices: int
    backend: str
    options: dict[str, Any] = field(default_factory=dict)
    shape: dict[str, Any] = field(default_factory=dict)
    blocks: int | None = None
    scaled: tuple[str, ...] = ()

    @property
    def said(self) -> str:
        """ "data 64 -> 2; blocks 40 -> 4": what the row's `scaled` column holds."""
        return "; ".join(self.scaled) or "nothing"


def plan_fields(plan: Any) -> dict[str, Any]:
    """The plan's fields from a `RankedPlan`, a row of `Plans.table` or a mapping."""
    row = getattr(plan, "row", None)
    source = row if isinstance(row, Mapping) and row else plan
    getter = source.get if hasattr(source, "get") else lambda k: getattr(source, k, None)
    found = {k: getter(k) for k in PLAN_FIELDS}
    # Fields a plan of before attention, sequence parallelism, context and uneven stages lacks.
    found |= {k: v for k, v in DEFAULTS.items() if found[k] is None}
    missing = [k for k, v in found.items() if v is None]
    if missing:
        raise GpkError(
            f"the plan has no {', '.join(missing)}; give plans.best, a row of plans.table or "
            "plans.top(3)"
        )
    found["sequence_parallel"] = bool(found["sequence_parallel"])
    found["stage_blocks"] = tuple(int(b) for b in found["stage_blocks"])
    numbers = (k for k in PLAN_FIELDS if k not in NOT_NUMBERS)
    for key in (k for k in numbers if _integral(found[k]) or k in PLAN_AXES):
        found[key] = whole_number(int(found[key]) if _integral(found[key]) else found[key], key)
    return found


def scale_plan(
    plan: Any,
    devices: int,
    batch: int,
    backend: str,
    model_blocks: int | None = None,
    heads: int | None = None,
    blocks: int | None = None,
) -> ScaledPlan:
    """`plan`'s shape on `devices` devices here at `batch` samples a step.

    Args:
        plan: a `RankedPlan`, a row of `Plans.table` or a mapping of the plan's fields.
        devices: the devices here the plan may use.
        batch: the global batch here.
        backend: the experiment's backend; a strategy it lacks runs on one that has it.
        model_blocks: the blocks of the model here, when it can be rebuilt with fewer (a
            keras-hub backbone); None runs it as it is.
        heads: the model's attention heads, which the tensor axis must divide.
        blocks: the blocks to rebuild it with; default the fewest the stages take.

    Raises:
        GpkError: a shape no backend runs yet, or one these devices, batch or model cannot
            hold, in one sentence, before any work.
    """
    fields_ = plan_fields(plan)
    whole_number(devices, "devices")
    whole_number(batch, "batch_size")
    data, tensor, stages = fields_[DATA], fields_[TENSOR], fields_[STAGES]
    pipeline, layered = _axis_record(STAGES), _axis_record(TENSOR)
    if stages > 1 and tensor > 1 and MESH not in pipeline.option_names():
        raise GpkError(
            f"tensor {tensor} × stages {stages} needs a pipeline whose stages split their layers "
            "over a mesh, which no backend runs yet; run a plan of tensor 1 or stages 1, e.g. "
            "plans.fitting.query('tensor == 1 or stages == 1').head(3)"
        )
    tensor_here = _largest_divisor(tensor, devices)
    stages_here = _largest_divisor(stages, devices // tensor_here)
    if heads is not None and heads % tensor_here:
        raise GpkError(
            f"tensor {tensor_here} does not divide the model's {heads} attention heads; give "
            f"the experiment a model whose heads are a multiple of {tensor_here}"
        )
    # A pipeline runs one replica unless its stages take a (data, tensor) mesh of their own, on
    # a backend that shards layers (the experiment's, unless a tensor axis needs another).
    # A context axis runs beside a tensor axis or alone (not within a pipeline's stages here),
    # its devices taken before the replicas', the batch split over the replicas alone.
    context = fields_[CONTEXT]
    context_here = 1
    if stages_here == 1 and batch % context == 0:
        context_here = _largest_divisor(context, devices // tensor_here)
    room = devices // (tensor_here * stages_here * context_here)
    meshed = MESH in pipeline.option_names() and (tensor_here > 1 or _shards(backend))
    room = 1 if stages_here > 1 and not meshed else room
    data_here = _replicas(fields_, min(data, room), batch // context_here, stages_here)
    record, sharding, words = _data_record(fields_["sharding"], data_here, tensor_here, stages_here)
    if stages_here > 1:
        record = pipeline
    elif tensor_here > 1 and not record.layout:
        record = layered
    # An expert axis runs where nothing else splits the layers: a (data, expert) mesh.
    expert = fields_[EXPERT]
    expert_here = math.gcd(expert, data_here) if tensor_here == stages_here == 1 else 1
    takes = set(record.option_names())
    if CONTEXT not in takes or expert_here > 1:
        context_here = 1  # the strategy that runs the plan has no context axis
    if expert_here > 1:  # the replicas beside the experts are whole
        record, words = _axis_record(EXPERT), "replicated"
        sharding = str(_whole_replicas().plan_sharding)
    shape = {**fields_, DATA: data_here, TENSOR: tensor_here, STAGES: stages_here}
    shape["sharding"] = sharding
    one_stage = record.layout and stages_here == 1
    options: dict[str, Any] = {MESH: (data_here * context_here, tensor_here)} if one_stage else {}
    if expert_here > 1:
        options[MESH] = (data_here // expert_here, expert_here)
    micro_batches = 1
    if stages_here > 1:
        options.update(_pipeline_options(fields_, stages_here, batch, data_here))
        micro_batches = options["micro_batches"]
        if data_here * tensor_here > 1:  # each stage on a (data, tensor) sub-mesh
            options[MESH] = (data_here, tensor_here)
    else:
        shape["virtual_stages"] = 1
    shape["micro_batches"] = micro_batches
    shape["micro_batch_size"] = batch // (data_here * micro_batches)
    # The long-sequence options where the strategy takes them (`strategies/long_sequences.py`);
    # a pipeline recomputes whole stages (`recompute`), never selectively.
    long_options = {CONTEXT, SEQUENCE_PARALLEL, CHECKPOINTING} <= takes
    recompute = fields_["checkpointing"] == FULL_CHECKPOINTING
    if RECOMPUTE in takes:
        options[RECOMPUTE] = recompute
    shape["checkpointing"] = FULL_CHECKPOINTING if recompute else NO_CHECKPOINTING
    if RECOMPUTE not in takes:
        shape["checkpointing"] = NO_CHECKPOINTING
    # Sequence parallelism wherever a tensor axis runs: tensor's, or a pipeline stage's mesh.
    split_norms = bool(fields_["sequence_parallel"]) and tensor_here > 1
    split_norms = split_norms and SEQUENCE_PARALLEL in takes and (context_here == 1 or long_options)
    if split_norms:
        options[SEQUENCE_PARALLEL] = True
    if long_options:
        shape["checkpointing"] = fields_["checkpointing"]
        given = {
            CONTEXT: (context_here, 1),
            CHECKPOINTING: (fields_["checkpointing"], NO_CHECKPOINTING),
        }
        options.update({k: value for k, (value, plain) in given.items() if value != plain})
    shape["context"], shape["sequence_parallel"], shape["stage_blocks"] = (
        context_here,
        split_norms,
        (),
    )
    shape[EXPERT] = expert_here  # beside a tensor axis or stages, the experts stay whole
    laid_out = MESH in options or context_here > 1 or split_norms
    laid_out = laid_out or shape["checkpointing"] not in (NO_CHECKPOINTING, FULL_CHECKPOINTING)
    offered = [name for name in record.worker_classes if _shards(name) or not laid_out]
    backend_here = backend if backend in offered else offered[0]
    searched = data * fields_["micro_batches"] * fields_["micro_batch_size"]
    scaled = _changes((DATA, data, data_here), ("global batch", searched, batch))
    if sharding != fields_["sharding"]:
        scaled.append(f"{fields_['sharding']} run as {words}")
    # With one stage, the plan's micro-batches are gradient accumulation, not run here.
    batching = "accumulation" if stages_here == 1 else "micro-batches"
    scaled += _changes(
        (TENSOR, tensor, tensor_here),
        (STAGES, stages, stages_here),
        (batching, fields_["micro_batches"], micro_batches),
        ("checkpointing", fields_["checkpointing"], shape["checkpointing"]),
        (CONTEXT, context, context_here),
        (EXPERT, expert, expert_here),
        ("backend", backend, backend_here),
    )
    if fields_["sequence_parallel"] and tensor_here > 1 and not split_norms:
        scaled.append("sequence parallel run as plain tensor")
    depth = _blocks_here(model_blocks, blocks, stages_here * shape["virtual_stages"], scaled)
    return ScaledPlan(
        strategy=record.name,
        devices=data_here * context_here * tensor_here * stages_here,
        backend=backend_here,
        options=options,
        shape=shape,
        blocks=depth,
        scaled=tuple(scaled),
    )


def _shards(backend: str) -> bool:
    """Whether `backend` splits layers over a device mesh (`mesh=`)."""
    return backend_record(backend).shards_layers


def _replicas(fields_: Mapping[str, Any], most: int, batch: int, stages: int) -> int:
    """The most replicas, up to `most`, that split the batch here and, for a pipeline, leave
    each replica a count of micro-batches its schedule takes (one replica at the least)."""
    for data in range(most, 0, -1):
        if batch % data:
            continue
        if stages == 1 or data == 1:
            return data
        try:
            _pipeline_options(fields_, stages, batch, data)
        except GpkError:
            continue
        return data
    return 1


def _changes(*pairs: tuple[str, Any, Any]) -> list[str]:
    """ "data 64 -> 2" for each (label, was, now) that changed."""
    return [f"{label} {was} -> {now}" for label, was, now in pairs if was != now]


def _axis_record(axis: str) -> Strategy:
    return next(r for r in runnable() if r.plan_axis == axis)


def _data_record(sharding: str, data: int, tensor: int, stages: int) -> tuple[Strategy, str, str]:
    """The strategy of the data axis, the sharding it trains and how a row says it: the record
    that trains `sharding`, else whole replicas (a record of the data axis that splits no
    state); one device of one replica is the baseline run."""
    replicas = _whole_replicas()
    trains = next((r for r in runnable() if r.plan_sharding == sharding), None)
    if trains is None or stages > 1 or data * tensor == 1:
        trains = replicas
    words = "replicated" if trains is replicas else str(trains.plan_sharding)
    if data * tensor == 1:
        return next(r for r in runnable() if r.baseline), str(replicas.plan_sharding), words
    return trains, str(trains.plan_sharding), words


def _whole_replicas() -> Strategy:
    """The record of the data axis whose replicas each hold the whole model's state."""
    return next(r for r in runnable() if r.plan_axis == DATA and not r.splits_state)


def _pipeline_options(
    fields_: Mapping[str, Any], stages: int, batch: int, data: int
) -> dict[str, Any]:
    """The pipeline's schedule, chunks and micro-batches here: the plan's count of micro-batches
    where the batch here splits into it and the schedule takes it, else the nearest below."""
    schedule, chunks, wanted = (
        fields_["schedule"],
        fields_["virtual_stages"],
        fields_["micro_batches"],
    )
    replica = batch // data
    for count in range(min(wanted, replica), 0, -1):
        if replica % count:
            continue
        try:
            check_plan(schedule, stages, count, chunks)
        except GpkError:
            continue
        return {"schedule": schedule, "micro_batches": count, "virtual_stages": chunks}
    raise GpkError(
        f"the batch here ({batch}) splits into no micro-batch count that {schedule} takes on "
        f"{stages} stages; give the experiment a batch_size of a multiple of {stages * 2}, "
        f"e.g. {stages * 4}"
    )


def _blocks_here(
    model_blocks: int | None, blocks: int | None, unit: int, scaled: list[str]
) -> int | None:
    """The blocks the model is rebuilt with: `blocks`, else the fewest multiple of the stages'
    chunks (`unit`) of at least `MIN_BLOCKS`; None keeps the model (not rebuildable, or already
    as small)."""
    if model_blocks is None:
        if blocks is not None:
            raise GpkError(
                f"blocks={blocks} asks to rebuild the model with fewer blocks, which the kit can "
                "do for a keras-hub backbone only (its config's num_layers); drop blocks="
            )
        scaled.append("model as it is (not a keras-hub backbone)")
        return None
    if blocks is not None:
        whole_number(blocks, "blocks")
        if blocks % unit:
            raise GpkError(
                f"blocks={blocks} does not split over {unit} stage chunks; use a multiple of "
                f"{unit}, e.g. {unit * max(1, blocks // unit)}"
            )
        target = blocks
    else:
        target = unit * -(-MIN_BLOCKS // unit)
    if target >= model_blocks:
        return None
    scaled.append(f"blocks {model_blocks} -> {target}")
    return target


def _largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, max(1, min(n, limit)) + 1) if n % d == 0)


def _integral(value: Any) -> bool:
    """A whole number a DataFrame row holds as numpy's int64 or a float of a whole value."""
    try:
        return not isinstance(value, bool | str) and float(value) == int(value)
    except (TypeError, ValueError):
        return False
