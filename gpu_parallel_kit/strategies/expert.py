"""`expert`: expert parallelism on JAX, a mixture of experts' stacked expert kernels spread over
the devices of an expert axis.

A mixture-of-experts block keeps its experts as stacked kernels, (experts × width × FFN) and
(experts × FFN × width), beside a router whose kernel (width × experts) picks each token's top-k
experts. `expert` finds the stacked kernels by shape (`sharding/experts.py`) and places each on
the mesh's expert axis along its leading dimension, so each of the axis's E devices holds
experts ÷ E of them, with their gradients and optimizer state. Every other weight stays whole
(and with `layout_map="own"`, where the model has one, is placed as its own layout says).

`experts` says how the expert block computes:
- "dense" (the default): keras-hub's own bank, every expert on every token, weighted by the
  router. Each device computes its own experts for all its tokens, and the experts' weighted
  outputs are summed over the expert axis: an all-reduce of the block's output.
- "dispatched": the kit's layer, as Megatron-Core, MaxText and DeepSpeed-MoE train: each token
  sent to the devices of the experts its router picks with an all-to-all, up to a capacity per
  expert (`capacity_factor` × tokens × top-k ÷ experts), computed there and sent back. Top-k ÷
  experts of the dense bank's FLOPs; a token beyond an expert's capacity is dropped (it passes
  on through the block's residual), and the row counts them.

The mesh is (data, expert): the data axis splits the batch as `data` does, the expert axis the
experts. Keras's mesh names the expert axis "model", as it names tensor's, so a model's own
layout map reads it.

>>> exp.run(strategy="expert", devices=4, backend="jax")
>>> exp.run(strategy="expert", devices=4, mesh=(2, 2), experts="dispatched", backend="jax")
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import GpkError
from .batches import check_batch
from .long_sequences import LONG_SEQUENCE_OPTIONS, check_sequence_split, sequence_options
from .option import Option, bad_value
from .plan_axes import EXPERT as EXPERT_AXIS
from .processes import CLUSTER, WORKERS, workers_option
from .record import GridCell, Strategy, run_name
from .tensor import LAYOUT_MAP, MESH, check_layout_map, check_mesh, mesh_size

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec

DENSE = "dense"  # keras-hub's bank: every expert on every token
DISPATCHED = "dispatched"  # the kit's layer: each token to its top-k experts, by all-to-all
EXPERT_KINDS = (DENSE, DISPATCHED)
CAPACITY_FACTOR = 1.25  # Switch Transformer's and GShard's usual training capacity


def capacity(text: str, name: str = "") -> float:
    """A capacity factor as the command line gives it: a number above 0, e.g. 1.25."""
    try:
        value = float(text)
    except ValueError:
        raise bad_value(name, repr(text), "is not a number like 1.25") from None
    if not value > 0:
        raise bad_value(name, value, "must be above 0, like 1.25")
    return value


EXPERT_OPTIONS = (
    replace(
        MESH,
        help="devices on the (data x expert) axes, e.g. 2x2 for 4 devices; default: every "
        "device on the expert axis",
    ),
    replace(
        LAYOUT_MAP,
        help="regular expressions over variable paths mapped to axes ('model' is the expert "
        "axis), over the kit's expert layout; 'own': the model's get_layout_map as well",
    ),
    Option(
        "experts",
        str,
        DENSE,
        "dense (keras-hub's bank: every expert computes every token) or dispatched (each "
        "token sent by all-to-all to its top-k experts only, up to a capacity)",
        choices=EXPERT_KINDS,
    ),
    Option(
        "capacity_factor",
        capacity,
        CAPACITY_FACTOR,
        "dispatched: each expert takes up to this × tokens × top-k ÷ experts tokens from each "
        "device, the rest dropped and counted",
        metavar="F",
    ),
    WORKERS,
    CLUSTER,
    *LONG_SEQUENCE_OPTIONS,
)


def check_experts(value: Any) -> str:
    """dense or dispatched; None is the default."""
    if value is None:
        return DENSE
    if value not in EXPERT_KINDS:
        raise GpkError(
            f"experts={value!r} is not known; use experts='dense' (keras-hub's bank) or "
            "experts='dispatched' (tokens sent to their experts by all-to-all)"
        )
    return value


def check_capacity_factor(value: Any) -> float:
    """A number above 0; None is the default."""
    if value is None:
        return CAPACITY_FACTOR
    if isinstance(value, str):
        try:
            return capacity(value, "capacity_factor")
        except argparse.ArgumentTypeError as error:
            raise GpkError(f"{error}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise GpkError(
            f"capacity_factor={value!r} must be a number above 0, e.g. capacity_factor=1.25 "
            "(each expert takes up to 1.25 × its even share of the tokens)"
        )
    return float(value)


def expert_options(options: Mapping[str, Any]) -> dict[str, Any]:
    mesh = options.get("mesh")
    return {
        "mesh": None if mesh is None else tuple(mesh) if isinstance(mesh, list) else mesh,
        "layout_map": check_layout_map(options.get("layout_map")),
        "experts": check_experts(options.get("experts")),
        "capacity_factor": check_capacity_factor(options.get("capacity_factor")),
        **workers_option(options),
        **sequence_options(options),
    }


def check_expert(spec: RunSpec) -> None:
    """The mesh fits the devices, the batch splits over its data axis; the options read."""
    if spec.mesh is not None:
        spec.options["mesh"] = check_mesh(spec.mesh, spec.replicas)
    spec.options["layout_map"] = check_layout_map(spec.layout_map)
    spec.options["experts"] = check_experts(spec.experts)
    spec.options["capacity_factor"] = check_capacity_factor(spec.capacity_factor)
    data, expert = spec.mesh_shape
    check_batch(spec.global_batch, data)
    check_sequence_split(spec, data, expert)


def _in_grid(cell: GridCell) -> bool:
    return cell.count > 1 and mesh_size(cell.plan, cell.count) == cell.count


def _label(spec: RunSpec) -> str:
    data, expert = spec.mesh_shape
    mesh = f" mesh {data}x{expert}" if data > 1 else ""
    how = f" {DISPATCHED} c={spec.capacity_factor:g}" if spec.experts == DISPATCHED else ""
    return f"{run_name(spec)}{mesh}{how}"


EXPERT = Strategy(
    name="expert",
    predictor="gpu_parallel_kit.analysis.cost_model.calibrated_step:predict_expert",
    summary="a mixture of experts' experts spread over a (data, expert) mesh of devices",
    worker_classes={"jax": "gpu_parallel_kit.worker.jax.experts:ExpertParallel"},
    missing={
        "tensorflow": (
            "expert parallelism shards stacked expert kernels with keras.distribution's "
            "LayoutMap and dispatches tokens with JAX collectives, so it runs on JAX only; use "
            "backend='jax', or strategy='pipeline' to split the model on TensorFlow"
        ),
    },
    fit_on=frozenset({"jax"}),
    measures_comm=True,
    layout=True,
    splits_state=True,
    plan_axis=EXPERT_AXIS,
    color="tab:pink",
    columns=("mesh", "state_bytes"),
    options=EXPERT_OPTIONS,
    plan=expert_options,
    over_processes=frozenset({"jax"}),
    check=check_expert,
    in_grid=_in_grid,
    label=_label,
)
