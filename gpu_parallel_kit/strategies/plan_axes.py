"""The axes of a training plan, innermost first: the integer columns plans and meshes share."""

from __future__ import annotations

TENSOR = "tensor"  # a layer's weights split over devices (inside a node, where it fits)
STAGES = "stages"  # the model cut into a pipeline
DATA = "data"  # replicas, or shards of one (fsdp), each with its share of the batch
# Data replicas that share one copy of the rest and divide a mixture of experts' experts: an
# axis inside DATA, as Megatron-Core's expert parallelism and the plan search count it.
EXPERT = "expert"

PLAN_AXES = (TENSOR, STAGES, DATA)  # the order ranks are laid out in: tensor fastest
# A run of a searched plan (`Experiment.run_plan`) keeps the plan's fields as it ran in its row's
# `extra` under RAN_PLAN, with SCALED saying what was scaled down; its table shows them.
RAN_PLAN = "plan"
SCALED = "scaled"

_WORDS = {TENSOR: "tensor", STAGES: "pipeline", DATA: "data"}


def mesh_label(**sizes: int) -> str:
    """Which part of a mesh is which, outermost first, absent axes left out:
    `mesh_label(data=2, tensor=2, stages=2)` is "pipeline 2 × tensor 2 × data 2"."""
    kept = [f"{_WORDS[axis]} {sizes[axis]}" for axis in (STAGES, TENSOR, DATA) if sizes.get(axis)]
    return " × ".join(kept)


def plan_shape(plan_axis: str | None, devices: int, mesh: str = "") -> dict[str, int]:
    """A run's devices as the plan axes' sizes (1 where an axis is absent): a (data, model) mesh
    ("2x2") gives data and tensor, and the axis the strategy spreads over takes the rest.

    >>> plan_shape(STAGES, 8, "2x2")
    {'tensor': 2, 'stages': 2, 'data': 2}
    """
    sizes = dict.fromkeys(PLAN_AXES, 1)
    if plan_axis == EXPERT:  # a (data, expert) mesh: every device is a data replica
        sizes[DATA] = devices
        return sizes
    if mesh:
        sizes[DATA], sizes[TENSOR] = (int(n) for n in mesh.split("x"))
    rest = max(devices // (sizes[DATA] * sizes[TENSOR]), 1)
    if plan_axis is not None and not (mesh and plan_axis in (DATA, TENSOR)):
        sizes[plan_axis] = rest if mesh else devices
    return sizes
