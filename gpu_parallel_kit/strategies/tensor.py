"""`tensor`: one layer's weights sharded over devices (Keras's `ModelParallel` with a
`LayoutMap` on JAX), over a (data, model) mesh, with the gradients of single-device training.

>>> exp.run(strategy="tensor", devices=4, backend="jax", mesh=(2, 2))
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import GpkError
from .batches import check_batch
from .long_sequences import LONG_SEQUENCE_OPTIONS, check_sequence_split, sequence_options
from .option import Option
from .option import mesh as mesh_shape
from .plan_axes import TENSOR as TENSOR_AXIS
from .processes import CLUSTER, WORKERS, workers_option
from .record import GridCell, Strategy, run_name

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec


class MeshShape(NamedTuple):
    """Devices on each axis of a (data, model) mesh: data × model is the run's devices."""

    data: int  # replicas, each with its share of the batch
    model: int  # devices one layer's weights (or a mixture's experts) are split over


def check_mesh(mesh: Any, devices: int) -> tuple[int, int]:
    """A (data, model) pair of positive whole numbers whose product is the device count."""
    if (
        not isinstance(mesh, tuple | list)
        or len(mesh) != 2
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in mesh)
    ):
        raise GpkError(
            f"mesh={mesh!r} must be two positive whole numbers (data, model), e.g. mesh=(2, 2)"
        )
    data, model = mesh
    if data * model != devices:
        raise GpkError(
            f"mesh={tuple(mesh)} holds {data * model} devices but the run has {devices}; make "
            f"data × model equal devices, e.g. mesh=(1, {devices})"
        )
    return data, model


OWN_LAYOUT = "own"  # layout_map="own": the model's get_layout_map ("model" is a strategy alias)


def check_layout_map(layout_map: Any) -> tuple[tuple[str, tuple[str | None, ...]], ...] | str:
    """The user's layout as (pattern, axes) pairs: patterns compile, axes name mesh axes; or
    "own", the model's own `get_layout_map(mesh)` (read in the worker, where the model is)."""
    if not layout_map:
        return ()
    if layout_map == OWN_LAYOUT:
        return OWN_LAYOUT
    if hasattr(layout_map, "items"):
        items = list(layout_map.items())
    elif isinstance(layout_map, tuple | list) and all(
        isinstance(pair, tuple | list) and len(pair) == 2 for pair in layout_map
    ):
        items = list(layout_map)  # (pattern, axes) pairs, as a RunSpec holds them
    else:
        raise GpkError(
            f"layout_map={layout_map!r} must map variable-path patterns to axes, e.g. "
            "{'.*dense/kernel': (None, 'model')}"
        )
    pairs = []
    for pattern, axes in items:
        axes = getattr(axes, "axes", axes)  # a keras.distribution.TensorLayout gives its axes
        try:
            re.compile(pattern)
        except (re.error, TypeError):
            raise GpkError(
                f"layout_map key {pattern!r} is not a regular expression over variable paths; "
                "use e.g. '.*dense/kernel'"
            ) from None
        if axes is None:
            axes = ()
        if not isinstance(axes, tuple | list) or any(
            a not in (None, "batch", "model") for a in axes
        ):
            raise GpkError(
                f"layout_map[{pattern!r}]={axes!r} must be a tuple of 'batch', 'model' or None "
                "per dimension, e.g. (None, 'model')"
            )
        pairs.append((pattern, tuple(axes)))
    return tuple(pairs)


MESH = Option(
    "mesh",
    mesh_shape,
    None,
    "devices on the (data x model) axes, e.g. 2x2 for 4 devices; default: every device on "
    "the model axis",
    metavar="DxM",
)
LAYOUT_MAP = Option(
    "layout_map",
    None,
    None,
    "regular expressions over variable paths mapped to axes ('model', 'batch' or None per "
    "dimension), over the kit's own layout; 'own': the model's get_layout_map",
    absent=(),
)


def mesh_size(plan: Mapping[str, Any], count: int) -> int:
    mesh = plan.get("mesh")
    return count if mesh is None else int(mesh[0]) * int(mesh[1])


def tensor_options(options: Mapping[str, Any]) -> dict[str, Any]:
    mesh = options.get("mesh")
    return {
        "mesh": None if mesh is None else tuple(mesh) if isinstance(mesh, list) else mesh,
        "layout_map": check_layout_map(options.get("layout_map")),
        **workers_option(options),
        **sequence_options(options),
    }


def check_tensor(spec: RunSpec) -> None:
    """The mesh fits the devices and the batch splits over its data axis; the layout parses."""
    if spec.mesh is not None:
        spec.options["mesh"] = check_mesh(spec.mesh, spec.replicas)  # every worker's devices
    spec.options["layout_map"] = check_layout_map(spec.layout_map)
    data, model = spec.mesh_shape
    check_batch(spec.global_batch, data)
    check_sequence_split(spec, data, model)


def _in_grid(cell: GridCell) -> bool:
    # One device splits nothing; a mesh of another size is for another count.
    return cell.count > 1 and mesh_size(cell.plan, cell.count) == cell.count


def _label(spec: RunSpec) -> str:
    data, model = spec.mesh_shape
    mesh = f" mesh {data}x{model}" if data > 1 else ""
    return f"{run_name(spec)}{mesh}"


TENSOR = Strategy(
    name="tensor",
    predictor="gpu_parallel_kit.analysis.cost_model.calibrated_step:predict_tensor",
    summary="each layer's weights sharded over a (data, model) mesh of devices",
    worker_classes={"jax": "gpu_parallel_kit.worker.jax.strategies:TensorParallel"},
    missing={
        "tensorflow": (
            "Keras's tensor parallelism (ModelParallel with a LayoutMap) runs on JAX only, its "
            "TensorFlow side being an unfinished prototype; use backend='jax'"
        ),
    },
    fit_on=frozenset({"jax"}),
    measures_comm=True,
    layout=True,
    splits_state=True,
    color="tab:cyan",
    columns=("mesh", "state_bytes"),
    options=(MESH, LAYOUT_MAP, WORKERS, CLUSTER, *LONG_SEQUENCE_OPTIONS),
    plan=tensor_options,
    over_processes=frozenset({"jax"}),
    check=check_tensor,
    in_grid=_in_grid,
    label=_label,
    projector="gpu_parallel_kit.analysis.cost_model.strategy_projectors:project_tensor",
    plan_axis=TENSOR_AXIS,
)
