"""`fsdp`: sharded data parallelism (ZeRO stage 3, PyTorch's FSDP) on JAX.

Every device trains on its slice of the batch, as under `data`, but holds only 1/D of each large
weight, with its gradient and optimizer state: the weight's largest dimension that the data axis
divides is placed on the mesh's "batch" axis by a `LayoutMap`, e.g. `("batch", None)`. GSPMD then
gathers the weight where a layer uses it and reduce-scatters its gradient, so each device's
memory for those weights falls as 1/D at about 1.5x data parallelism's traffic. Keras builds each
optimizer slot with its weight's layout, so the state follows without being asked.

Weights under `min_shard_bytes` stay replicated (their gradients all-reduced, as under `data`),
as FSDP's auto-wrap policy and DeepSpeed's `stage3_param_persistence_threshold` leave small
parameters whole: gathering a bias costs a collective's latency and saves almost nothing.
With `mesh=(d, m)` the model axis shards each layer as `tensor` does and the data axis as here
("hybrid sharding").

>>> exp.run(strategy="fsdp", devices=4, backend="jax")
>>> exp.run(strategy="fsdp", devices=4, backend="jax", mesh=(2, 2), min_shard_bytes=0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import GpkError
from ..sharding.layout import Layout, Placement
from ..sharding.traffic import DATA, Traffic, full_bytes, tensor_traffic
from .batches import check_batch
from .long_sequences import LONG_SEQUENCE_OPTIONS, check_sequence_split, sequence_options
from .option import Option, whole
from .plan_axes import DATA as PLAN_DATA
from .processes import CLUSTER, WORKERS, workers_option
from .record import GridCell, Strategy, run_name
from .tensor import LAYOUT_MAP, MESH, OWN_LAYOUT, check_layout_map, check_mesh, mesh_size

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec

DATA_AXIS = DATA
MODEL_AXIS = "model"
# DeepSpeed ZeRO-3 keeps parameters under 1e5 elements whole (stage3_param_persistence_threshold,
# "smaller values use less memory, but can greatly increase communication, especially
# latency-bound messages"): 1e5 float32 elements.
MIN_SHARD_BYTES = 100_000 * 4


FSDP_OPTIONS = (
    replace(
        MESH,
        help="devices on the (data x model) axes, e.g. 2x2 for 4 devices, the model axis split "
        "as tensor splits it; default: every device on the data axis",
    ),
    replace(
        LAYOUT_MAP,
        help="regular expressions over variable paths mapped to axes, kept as given over the "
        "kit's own placements",
    ),
    Option(
        "min_shard_bytes",
        whole,
        None,
        f"shard the weights of at least this many bytes, 0 for all; default: {MIN_SHARD_BYTES}",
        metavar="BYTES",
    ),
    WORKERS,
    CLUSTER,
    *LONG_SEQUENCE_OPTIONS,
)


def check_min_shard_bytes(value: Any) -> int:
    """A whole number of bytes, 0 or more; None is the default."""
    if value is None:
        return MIN_SHARD_BYTES
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GpkError(
            f"min_shard_bytes={value!r} must be a whole number of bytes, 0 or more, e.g. "
            f"min_shard_bytes={MIN_SHARD_BYTES} (weights smaller than this stay replicated)"
        )
    return value


def fsdp_options(options: Mapping[str, Any]) -> dict[str, Any]:
    mesh = options.get("mesh")
    return {
        "mesh": None if mesh is None else tuple(mesh) if isinstance(mesh, list) else mesh,
        "layout_map": _own_refused(check_layout_map(options.get("layout_map"))),
        "min_shard_bytes": check_min_shard_bytes(options.get("min_shard_bytes")),
        **workers_option(options),
        **sequence_options(options),
    }


def _own_refused(layout_map: Any) -> Any:
    if layout_map == OWN_LAYOUT:
        raise GpkError(
            "layout_map='own' (the model's get_layout_map) is for strategy='tensor'; fsdp "
            "shards the weights over the data axis itself: drop layout_map, or use "
            "strategy='tensor'"
        )
    return layout_map


def check_fsdp(spec: RunSpec) -> None:
    """Every device on the data axis unless a mesh says otherwise; the batch splits over it."""
    mesh = spec.mesh if spec.mesh is not None else (spec.replicas, 1)  # every worker's devices
    spec.options["mesh"] = check_mesh(mesh, spec.replicas)
    spec.options["layout_map"] = _own_refused(check_layout_map(spec.layout_map))
    spec.options["min_shard_bytes"] = check_min_shard_bytes(spec.min_shard_bytes)
    check_batch(spec.global_batch, spec.mesh[0])
    check_sequence_split(spec, spec.mesh[0], spec.mesh[1])


def _in_grid(cell: GridCell) -> bool:
    return cell.count > 1 and mesh_size(cell.plan, cell.count) == cell.count


def _label(spec: RunSpec) -> str:
    data, model = spec.mesh_shape
    mesh = f" mesh {data}x{model}" if model > 1 else ""
    return f"{run_name(spec)}{mesh}"


def shard_over_data(layout: Layout, data: int, min_shard_bytes: int) -> Layout:
    """`layout` (the tensor-parallel one over the model axis) with each weight of at least
    `min_shard_bytes` also placed on the data axis, along its largest dimension that `data`
    divides and the model axis leaves free; a user's own placement is kept as given.

    >>> from gpu_parallel_kit.sharding.layout import Placement
    >>> plain = Layout(1, [Placement("d", "d/kernel", (64, 32), (None, None), "replicated")])
    >>> shard_over_data(plain, 2, 0).axes_by_path()
    {'d/kernel': ('batch', None)}
    """
    placements = []
    for p in layout.placements:
        axes = p.axes if layout.model > 1 else tuple(None if a == MODEL_AXIS else a for a in p.axes)
        role = p.role if layout.model > 1 or p.role == "user" else "replicated"
        free = [
            i
            for i, size in enumerate(p.shape)
            if axes[i] is None and size % data == 0 and size >= data
        ]
        if role != "user" and data > 1 and free and full_bytes(p) >= min_shard_bytes:
            dim = max(free, key=lambda i: (p.shape[i], -i))
            axes = tuple(DATA_AXIS if i == dim else a for i, a in enumerate(axes))
            role = "sharded" if role == "replicated" else f"{role}+sharded"
        placements.append(replace(p, axes=axes, role=role))
    return Layout(layout.model, placements, list(layout.collectives))


def held_bytes(p: Placement, data: int, model: int) -> int:
    """Bytes of `p` one device holds on a (data, model) mesh."""
    divisor = (data if DATA_AXIS in p.axes else 1) * (model if MODEL_AXIS in p.axes else 1)
    return full_bytes(p) // divisor


# A sharded data-parallel step's collectives are those of any layout with weights on the data
# axis, counted once in `sharding.traffic` (a tensor layout that puts them there, a model's own,
# moves the same): each sharded weight gathered for the forward and again for the backward (it
# is freed in between), its gradient reduce-scattered; replicated weights' gradients
# all-reduced. XLA may keep a gathered weight alive and skip the second gather, so a compiled
# step can move less than this count.
FsdpTraffic = Traffic


def fsdp_traffic(layout: Layout, data: int, global_batch: int) -> Traffic:
    """Ring counts: an all-gather or a reduce-scatter of S bytes over D devices moves (D-1)/D·S
    per device, an all-reduce twice that; so a sharded weight costs 3(D-1)/D·S per step against
    data parallelism's 2(D-1)/D·S."""
    return tensor_traffic(layout, data, global_batch)


FSDP = Strategy(
    name="fsdp",
    predictor="gpu_parallel_kit.analysis.cost_model.calibrated_step:predict_fsdp",
    summary="sharded data parallel (ZeRO-3): each device holds 1/N of the large weights, "
    "gathered for use",
    worker_classes={"jax": "gpu_parallel_kit.worker.jax.strategies:ShardedDataParallel"},
    missing={
        "tensorflow": (
            "tf.distribute has no sharded data parallelism for Keras 3 models; use "
            "backend='jax', or strategy='pipeline' to split the model on TensorFlow"
        ),
    },
    fit_on=frozenset({"jax"}),
    all_reduce=True,
    measures_comm=True,
    layout=True,
    splits_state=True,
    color="tab:olive",
    columns=("mesh", "state_bytes"),
    options=FSDP_OPTIONS,
    plan=fsdp_options,
    over_processes=frozenset({"jax"}),
    check=check_fsdp,
    in_grid=_in_grid,
    label=_label,
    projector="gpu_parallel_kit.analysis.cost_model.strategy_projectors:project_fsdp",
    plan_axis=PLAN_DATA,
    plan_sharding="fsdp",
)
