"""Each pipeline stage's devices on JAX: one device, or a `(data, model)` sub-mesh on which the
stage's layers are split over the model axis as `tensor` splits them (the kit's derived layout,
or the model's own with `layout_map="own"`) and its micro-batch over the data axis.

The devices are laid out as the plan axes rank them (`strategies/plan_axes.py`), tensor fastest,
then stages, then data: device `t + T*(s + S*d)` holds tensor shard `t` of stage `s` in data
replica `d`, so a stage's tensor group is neighbouring devices (one node's, on GPUs) and its cuts
join devices T apart. A stage's jitted passes take weights and batches placed with
`NamedSharding` on its sub-mesh; GSPMD inserts the model axis's all-reduces inside the layers
and the data axis's gradient all-reduce inside each backward.
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import keras
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ....sharding.experts import with_experts_split
from ....sharding.layout import Layout, derive_layout
from ....sharding.traffic import tensor_traffic
from ....strategies.fsdp import DATA_AXIS, MODEL_AXIS
from ....strategies.tensor import OWN_LAYOUT
from ...layers import read_layers
from ..device_setup import device_names
from ..layout import check_divides, own_layout
from ..sequence_split import StageActivations


class StagePlacement:
    """Where one stage's arrays live: its devices, each weight's sharding and the batch's.

    Args:
        devices: the stage's devices, data-major: `data` rows of `model` devices.
        data: devices on the data axis (the micro-batch split over them).
        model: devices on the model axis (the layers split over them).
        axes: variable path -> mesh axes per dimension (the layout); absent paths replicated.
        activations: the layouts of the stage's activations on its sub-mesh
            (`sequence_split.stage_activations`), or None.
    """

    def __init__(
        self,
        devices: list[Any],
        data: int = 1,
        model: int = 1,
        axes: dict[str, tuple[str | None, ...]] | None = None,
        activations: StageActivations | None = None,
    ) -> None:
        self.devices = list(devices)
        self.activations = activations
        self.device = self.devices[0]
        self.shape = (data, model)
        self.axes = axes or {}
        grid = np.array(self.devices, dtype=object).reshape(data, model)
        self.mesh = Mesh(grid, (DATA_AXIS, MODEL_AXIS)) if len(self.devices) > 1 else None

    @property
    def names(self) -> list[str]:
        return device_names(self.devices)

    def _sharding(self, axes: tuple[str | None, ...]) -> Any:
        return self.device if self.mesh is None else NamedSharding(self.mesh, PartitionSpec(*axes))

    def tracing(self) -> contextlib.AbstractContextManager:
        """The scope a stage's layers are traced in: its activations' layouts, where it has
        any."""
        if self.activations is None:
            return contextlib.nullcontext()
        return self.activations.distribution.scope()

    def weight(self, path: str, rank: int) -> Any:
        """The sharding of the variable at `path`: its layout's axes, else replicated."""
        return self._sharding(tuple(self.axes.get(path, ()))[:rank])

    def put_weights(self, variables: list[Any], like: list[Any] | None = None) -> list[jax.Array]:
        """The variables' values on the stage, each sharded as its layout says; optimizer
        slots (`like` the stage's trainable variables) as the weight they were built from.
        Always copies: the stage's calls donate its arrays, which must not be the variables'."""
        paths = [v.path if like is None else _reference(v, like) for v in variables]
        return [
            jax.device_put(v.value, self.weight(path, len(v.shape)), may_alias=False)
            for v, path in zip(variables, paths, strict=True)
        ]

    def weights_like(self, variables: list[Any]) -> list[Any] | None:
        """The sharding of each of `variables` on the sub-mesh; None on one device."""
        if self.mesh is None:
            return None
        return [self.weight(v.path, len(v.shape)) for v in variables]

    def put_batch(self, tree: Any) -> Any:
        """A micro-batch's arrays (activations, their gradients, targets) split over the data
        axis by their first dimension; scalars replicated."""
        if self.mesh is None:
            return jax.device_put(tree, self.device)
        return jax.tree.map(
            lambda a: jax.device_put(a, self._sharding((DATA_AXIS,) if np.ndim(a) else ())), tree
        )

    def put_scalar(self, value: Any) -> jax.Array:
        return jax.device_put(value, self._sharding(()))


def _reference(slot: Any, trainable: list[Any]) -> str:
    """The path of the weight an optimizer slot was built from (Keras names it
    "<optimizer>/<path with _ for />_<slot>", of the weight's shape); "" for none."""
    name = slot.path.partition("/")[2]
    found = [
        v.path
        for v in trainable
        if name.startswith(v.path.replace("/", "_") + "_") and tuple(v.shape) == tuple(slot.shape)
    ]
    return max(found, key=len, default="")


def stage_groups(devices: list[Any], stages: int, data: int, model: int) -> list[list[Any]]:
    """Each stage's devices, data-major: device `t + T*(s + S*d)` is tensor shard `t` of stage
    `s` in replica `d`."""
    return [
        [devices[t + model * (s + stages * d)] for d in range(data) for t in range(model)]
        for s in range(stages)
    ]


def stage_layout(spec: Any, model: keras.Model, sample: Any, group: list[Any]) -> Layout:
    """The tensor-parallel layout over one stage's (data, model) mesh, from the whole model's
    layers (`sharding/layout.py`), checked against the mesh before any stage is placed."""
    data, model_axis = spec.mesh
    layers = read_layers(model, sample)
    if spec.layout_map == OWN_LAYOUT:
        mesh = keras.distribution.DeviceMesh(
            (data, model_axis), (DATA_AXIS, MODEL_AXIS), devices=group
        )
        layout = derive_layout(layers, model_axis, own_layout(model, mesh), OWN_LAYOUT)
    else:
        layout = derive_layout(layers, model_axis, spec.layout_map)
    layout = with_experts_split(layout, layers)  # a mixture of experts' banks, divided
    check_divides(layout, {DATA_AXIS: data, MODEL_AXIS: model_axis})
    return layout


def stage_traffic(layout: Layout, layers: list[str], data: int, batch: int, parts: int) -> dict:
    """What one stage's tensor collectives move per step: its layers' activation all-reduces
    over the model axis, and its replicated weights' gradients all-reduced over the data axis
    once per micro-batch (the gradient sums are replicated over it), in bytes."""
    own = set(layers)
    part = Layout(
        layout.model,
        [p for p in layout.placements if p.layer in own],
        [c for c in layout.collectives if c.layer in own],
    )
    traffic = tensor_traffic(part, data, batch)
    gradients = traffic.gradient_bytes * parts
    return {
        "tensor_all_reduce_bytes": traffic.activation_bytes,
        "data_all_reduce_bytes": gradients,
        "tensor_collectives": len(part.collectives),
    }


def held_bytes(arrays: list[Any]) -> dict[str, int]:
    """Bytes each device holds of `arrays`, from their shards."""
    held: dict[str, int] = {}
    for array in arrays:
        for shard in array.addressable_shards:
            name = device_names([shard.device])[0]
            held[name] = held.get(name, 0) + int(shard.data.nbytes)
    return held
