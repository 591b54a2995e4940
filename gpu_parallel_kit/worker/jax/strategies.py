"""A JAX run's strategy: which `keras.distribution` it builds under, and what only it measures.

The tensor-parallel layout is read off the model, so the model is built twice: once plainly, to
read its layers and measure its activations on one sample, and once under `ModelParallel`, whose
`LayoutMap` must exist before the variables do (Keras places each variable as it is created).
`keras.backend.clear_session()` between the two gives the second build the same layer names,
hence the same variable paths, and the same seed gives it the same initial weights.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from ..runs.spec import RunSpec
from ..sharding.layout import Layout, derive_layout
from ..sharding.traffic import data_traffic, tensor_traffic
from .budget import check_budget
from .jax_devices import DETERMINISM, device_names
from .jax_layout import layout_map, read_layers

_METHOD_DATA = (
    "exposed: median call of the per-device gradients with minus without their sum over "
    "devices (jax.shard_map, psum), alternated in blocks; standalone: the sum alone"
)
_METHOD_TENSOR = (
    "standalone: the layout's all-reduces alone (activations over the model axis, gradient "
    "shards over the data axis) on arrays of the sizes they move; XLA places them inside the "
    "layers, so no step without them exists to subtract"
)
_VIRTUAL = "; host devices: runtime overhead on shared cores, not a network cost"


class JaxStrategy:
    """single, data or tensor on the run's JAX devices."""

    def __init__(self, spec: RunSpec, devices: list[Any]) -> None:
        self.spec = spec
        self.devices = devices
        self.distribution: Any = None
        self.layout: Layout | None = None
        if spec.strategy == "data":
            self.distribution = keras.distribution.DataParallel(devices=devices)

    def scope(self) -> contextlib.AbstractContextManager:
        return (
            self.distribution.scope() if self.distribution is not None else contextlib.nullcontext()
        )

    def build(self, builder: Callable[[], keras.Model], sample: Any) -> keras.Model:
        """The compiled, built model under the run's distribution (for tensor, the layout is
        derived first, from a plain build called on `sample`, one sample of the inputs)."""
        if self.spec.strategy == "tensor":
            self._derive_layout(builder, sample)
        with self.scope():
            return builder()

    def _derive_layout(self, builder: Callable[[], keras.Model], sample: Any) -> None:
        data, model_axis = self.spec.mesh_shape
        probe = builder()
        layers = read_layers(probe, sample)
        del probe
        keras.backend.clear_session()
        self.layout = derive_layout(layers, model_axis, self.spec.layout_map)
        mesh = keras.distribution.DeviceMesh(
            (data, model_axis), ("batch", "model"), devices=self.devices
        )
        self.distribution = keras.distribution.ModelParallel(
            layout_map=layout_map(self.layout, mesh), batch_dim_name="batch"
        )

    def prepare(self, model: keras.Model) -> None:
        """Build the optimizer's slots beside their variables and hold what each device was given
        (parameters and optimizer state, the shards actually placed) against the memory budget,
        before the first step."""
        with self.scope():
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
        self.state_bytes = placed_bytes([*model.weights, *model.optimizer.variables])
        check_budget(
            self.state_bytes,
            self.spec.memory_budget,
            "shard the layers over more devices with strategy='tensor'",
        )

    def describe(self) -> str:
        if self.spec.strategy == "data":
            return "xla all-reduce (DataParallel)"
        if self.spec.strategy == "tensor":
            return "xla collectives (ModelParallel)"
        return ""

    def after_training(self, model: keras.Model, x: Any, y: Any) -> dict[str, Any]:
        """Communication measured on `x`, `y`, one global batch of the run's data (no update
        applied)."""
        from .jax_comm import measure_data_all_reduce, measure_tensor_collectives  # noqa: PLC0415

        if self.spec.strategy == "data" and len(self.devices) > 1:
            return measure_data_all_reduce(model, self.devices, x, y)
        if self.spec.strategy == "tensor" and self.layout is not None and len(self.devices) > 1:
            traffic = self._tensor_traffic()
            local = self.spec.global_batch // self.spec.mesh_shape[0]
            sizes = [c.elements_per_sample * local * 4 for c in self.layout.collectives]
            return measure_tensor_collectives(
                self.devices, self.spec.mesh_shape, sizes, traffic.gradient_bytes
            )
        return {}

    def _tensor_traffic(self):
        data, _ = self.spec.mesh_shape
        assert self.layout is not None
        return tensor_traffic(self.layout, data, self.spec.global_batch)

    def result_fields(
        self, model: keras.Model, measured: dict[str, Any] | None, step_time_s: float | None
    ) -> dict[str, Any]:
        """Memory from the placed shards, bytes from the layout, and the communication measured
        (`measured` None: measure_comm=False skipped it, and the row says so)."""
        state = placed_bytes([*model.weights, *model.optimizer.variables])
        parameter_bytes = sum(_nbytes(v) for v in model.trainable_variables)
        extra: dict[str, Any] = {
            "state_bytes": state,
            "parameter_bytes": parameter_bytes,
        }
        if self.spec.training.deterministic:
            extra["determinism"] = DETERMINISM[self.spec.devices.kind]
        if self.spec.strategy == "tensor" and self.layout is not None:
            traffic = self._tensor_traffic()
            extra["layout"] = [
                {
                    "layer": p.layer,
                    "variable": p.path,
                    "shape": list(p.shape),
                    "axes": [a or "" for a in p.axes],
                    "role": p.role,
                    "shard_shape": shard_shape(model, p.path),
                }
                for p in self.layout.placements
            ]
            extra["collectives"] = [
                {
                    "layer": c.layer,
                    "direction": c.direction,
                    "why": c.why,
                    "elements_per_sample": c.elements_per_sample,
                }
                for c in self.layout.collectives
            ]
        elif self.spec.strategy == "data":
            traffic = data_traffic(
                parameter_bytes, len(self.devices), len(model.trainable_variables)
            )
        else:
            traffic = None
        fields: dict[str, Any] = {"extra": extra}
        if traffic is not None:
            extra["traffic_bytes_per_device"] = traffic.traffic_bytes_per_device
            extra["activation_bytes"] = traffic.activation_bytes
            extra["gradient_bytes"] = traffic.gradient_bytes
            fields["comm_bytes"] = traffic.reduced_bytes
        if measured is None and self.spec.strategy in ("data", "tensor"):
            why = (
                "the measurement failed; the worker's stderr says why"
                if self.spec.measure_comm
                else "measure_comm=False"
            )
            extra.update(comm_measured=False, comm_method=f"not measured ({why})")
        elif measured:
            comm = dict(measured)
            exposed = comm.pop("comm_time_s")
            virtual = _VIRTUAL if self.spec.devices.virtual else ""
            method = _METHOD_DATA if self.spec.strategy == "data" else _METHOD_TENSOR
            extra.update(comm, comm_method=method + virtual)
            fields["comm_time_s"] = exposed
            fields["comm_share"] = exposed / step_time_s if step_time_s else None
        return fields


def placed_bytes(variables: list[Any]) -> dict[str, int]:
    """Bytes each device holds of `variables`, from the shards actually placed on it."""
    held: dict[str, int] = {}
    for variable in variables:
        value = variable.value
        for shard in getattr(value, "addressable_shards", ()):
            name = device_names([shard.device])[0]
            held[name] = held.get(name, 0) + int(shard.data.nbytes)
    return held


def shard_shape(model: keras.Model, path: str) -> list[int]:
    """The shape of one device's piece of the variable at `path`."""
    for variable in model.weights:
        if variable.path == path:
            shards = getattr(variable.value, "addressable_shards", ())
            if shards:
                return [int(d) for d in shards[0].data.shape]
            return [int(d) for d in variable.shape]
    return []


def _nbytes(variable: Any) -> int:
    return int(np.prod(variable.shape, dtype=np.int64)) * np.dtype(variable.dtype).itemsize
