"""The axes of a training plan, innermost first: the integer columns plans and meshes share."""

from __future__ import annotations

TENSOR = "tensor"  # a layer's weights split over devices (inside a node, where it fits)
STAGES = "stages"  # the model cut into a pipeline
DATA = "data"  # replicas, or shards of one (fsdp), each with its share of the batch

PLAN_AXES = (TENSOR, STAGES, DATA)  # the order ranks are laid out in: tensor fastest
