"""A JAX run's strategy, one class each: which `keras.distribution` it builds under, how it
checks the memory budget, and what only it measures, as Keras's own `DataParallel` and
`ModelParallel` each own their mesh, layout and data distribution.

Each strategy's record names its class here (`strategies.<name>.worker_classes["jax"]`).

>>> strategy = DataParallel(spec, devices)
>>> model = strategy.build(builder, sample)       # under keras.distribution.DataParallel
>>> run = ModelAndBatches(model, batches)
>>> strategy.before_training(run)                 # the placed shards against memory_budget
>>> strategy.train(run, steps_per_epoch, recorder)
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable
from typing import Any

import keras

from ...runs.description.communication_reuse import reuse_fields
from ...runs.description.run_spec import RunSpec
from ...sharding.experts import ExpertBank, dense_activation_bytes, find_banks, with_experts_split
from ...sharding.layout import Layout, derive_layout
from ...sharding.traffic import DATA, data_traffic, gathered_bytes, tensor_traffic, with_context
from ...strategies import strategy_record
from ...strategies.fsdp import (
    DATA_AXIS,
    MIN_SHARD_BYTES,
    MODEL_AXIS,
    fsdp_traffic,
    shard_over_data,
)
from ...strategies.long_sequences import SequenceSplit
from ...strategies.tensor import OWN_LAYOUT
from ..budget import check_budget
from ..layers import read_layers
from ..measuring.comm_once import communication_once
from ..measuring.recorder import StepRecorder, StepTimer
from ..measuring.stats import COMM_BLOCKS, COMM_STEPS_PER_BLOCK, Timing
from ..strategy_hooks import ModelAndBatches, WorkerStrategy
from .layout import check_divides, layout_map, own_layout
from .placed import nbytes, placed_axes, placed_bytes, shard_shape, slot_axes
from .sequence_split import (
    ContextParallel,
    add_activation_layouts,
    check_sample,
    device_mesh,
    kept_activations,
    key_value_bytes,
    recompute_layers,
    sequence_norms,
    step_temporaries,
)

_VIRTUAL = "; host devices: runtime overhead on shared cores, not a network cost"
# A data run with a context axis: its collectives alone (`comm.context_collectives`).
CONTEXT_METHOD = (
    "standalone: each block's keys and values gathered over the context axis and their "
    "gradients reduce-scattered back, and the gradients summed over every device, on arrays of "
    "the sizes they move (counted from the model's blocks); the step's activations carry the "
    "context axis's layout, so no per-device backward exists to subtract"
)
_SPLIT_HINT = "shard the model over more devices with strategy='fsdp' or strategy='tensor'"


class JaxStrategy(WorkerStrategy):
    """What every JAX strategy shares: its scope, the build, the budget, `fit`, the
    communication measured, the row's fields; the hooks are `WorkerStrategy`'s.

    A subclass sets `distribution` (or leaves it None: no distribution) and overrides what it
    alone does: `describe`, `communication_timing`, `traffic`, `layout_fields`.
    """

    method = ""  # how its communication is measured, for the row

    def __init__(self, spec: RunSpec, devices: list[Any]) -> None:
        self.spec = spec
        self.devices = devices
        self.record = strategy_record(spec.strategy)
        self.distribution: Any = None
        self.state_bytes: dict[str, int] = {}
        self.sample: Any = None  # one sample of the inputs: the activations' shapes
        self.split = SequenceSplit.of(spec)  # context, sequence parallelism, recomputation
        self.split_fields: dict[str, Any] = {}  # what they did, for the row
        self.layers: list[Any] | None = None  # the layers as read, once
        # The communication measurement compiled before the first timed step, to time after
        # training; whether compiling it failed; and its figures once timed.
        self.timing: Timing | None = None
        self.timing_failed = False
        self.measured: dict[str, Any] | None = None

    def scope(self) -> contextlib.AbstractContextManager:
        return (
            self.distribution.scope() if self.distribution is not None else contextlib.nullcontext()
        )

    def build(self, builder: Callable[[], keras.Model], sample: Any) -> keras.Model:
        """The compiled, built model under the run's distribution, its chosen layers recomputed
        in the backward (`checkpointing=`); `sample` is one sample of the inputs, for a
        strategy that reads the model before building it for real."""
        self.sample = sample
        with self.scope():
            model = builder()
        recomputed = recompute_layers(model, self.split)
        if self.split.given:
            self.split_fields.update(
                context=self.split.context,
                sequence_parallel=self.split.sequence_parallel,
                checkpointing=self.split.checkpointing.value,
                recomputed_layers=recomputed,
            )
        return model

    @property
    def data_axis(self) -> int:
        """Devices the global batch is split over."""
        return 1

    def prepare(self, model: keras.Model) -> None:
        """Build the optimizer's slots beside their variables and hold what each device needs
        (the shards of parameters and optimizer state actually placed, their gradients and its
        activations) against the memory budget, before the first step."""
        with self.scope():
            if not model.optimizer.built:
                model.optimizer.build(model.trainable_variables)
        self.state_bytes = placed_bytes([*model.weights, *model.optimizer.variables])
        if self.spec.memory_budget is not None:  # a refused row keeps each device's parts
            check_budget(self.memory(model), self.spec.memory_budget, _SPLIT_HINT)

    def memory(self, model: keras.Model) -> dict[str, Any]:
        """Each device's parameters and optimizer state as placed (measured), its gradients as
        its trainable shards (modelled) and its activations (modelled: every layer's output for
        its share of the batch, float32, kept for the backward, and an expert bank's matmul
        outputs for each (token, expert) it computes)."""
        params = placed_bytes(model.weights)
        optimizer = placed_bytes(model.optimizer.variables)
        grads = placed_bytes(model.trainable_variables)
        activations = self._activation_bytes(model)
        devices = {
            name: {
                "params_bytes": params.get(name, 0),
                "grads_bytes": grads.get(name, 0),
                "optimizer_bytes": optimizer.get(name, 0),
                "activations_bytes": activations,
            }
            for name in params
        }
        return {
            "devices": devices,
            "how": {
                "params_bytes": "measured: the shards JAX placed on the device",
                "grads_bytes": "modelled: one gradient per trainable shard placed",
                "optimizer_bytes": "measured: the optimizer's shards placed on the device",
                "activations_bytes": (
                    "modelled: every layer's output for the device's share of the batch, "
                    "float32, kept for the backward; an expert bank's matmul outputs for every "
                    "(token, expert) it computes: a dense bank every local expert on every token, "
                    "dispatched experts their capacity's slots"
                ),
            },
        }

    def before_training(self, run: ModelAndBatches) -> None:
        """The memory budget, before the first step (`prepare`)."""
        self.prepare(run.model)

    def train(self, run: ModelAndBatches, steps_per_epoch: int, recorder: StepRecorder) -> None:
        """Keras's own `fit` on the run's batches, under the strategy's distribution."""
        with self.scope():
            run.model.fit(
                run.batches,
                epochs=self.spec.training.epochs * self.spec.rounds_here,
                steps_per_epoch=steps_per_epoch,
                callbacks=[StepTimer(recorder, self.executions_ahead)],
                verbose=0,
                shuffle=False,
            )

    @property
    def executions_ahead(self) -> int | None:
        """How far fit may run ahead of the timer: bounded on host devices that share
        collectives (`recorder.StepTimer`), free elsewhere, as a user's own fit runs."""
        several_hosts = self.spec.devices.kind == "cpu" and len(self.devices) > 1
        return HOST_EXECUTIONS_AHEAD if several_hosts else None

    def prepare_measurement(self, run: ModelAndBatches) -> None:
        """Read the layers the row's memory models its activations from (training does not
        change them), and compile the communication measurement on the run's first batch,
        once, before the first timed step; a failure leaves the row marked not measured, and
        stderr says why."""
        self._activation_bytes(run.model)
        lent = self.spec.comm_from is not None
        if self.timing is not None or self.timing_failed or lent or not self.spec.measure_comm:
            return
        try:
            timing = self.communication_timing(run.model, *run.batches[0])
            self.timing = timing or _nothing_to_time
        except Exception:  # noqa: BLE001 - a measurement must not cost the run its results
            traceback.print_exc()
            self.timing_failed = True

    def measure(self, run: ModelAndBatches) -> None:
        """The communication figures, timed now, or None when measure_comm=False skipped them
        or measuring failed: the trained run keeps its row (marked not measured), and the
        worker's stderr keeps why."""

        def prepared() -> Any:
            self.prepare_measurement(run)
            return self.timing

        self.measured, _ = communication_once(self.spec.comm_from, prepared)

    def _activation_bytes(self, model: keras.Model) -> float:
        """From the layers, read once."""
        try:
            if self.layers is None:
                self.layers = read_layers(model, self.sample)
        except Exception:  # noqa: BLE001 - a model that cannot be read keeps its other figures
            return float("nan")
        elements = sum(layer.out_elements or 0 for layer in self.layers)
        layers = elements * (self.spec.global_batch // self.data_axis) * 4
        return float(layers + self.expert_activation_bytes(find_banks(self.layers)))

    def expert_activation_bytes(self, banks: list[ExpertBank]) -> int:
        """What the model's expert banks keep per device beyond their block's output: keras-hub's
        dense bank computes every expert on every token of the device's share of the batch."""
        return dense_activation_bytes(banks, self.spec.global_batch, (self.data_axis, 1))

    def communication_timing(self, model: keras.Model, x: Any, y: Any) -> Timing | None:
        """Communication to measure on `x`, `y`, one global batch of the run's data (no update
        applied), compiled as the measurement is prepared and timed when `measure` calls it
        (`comm.py`); None where there is none."""
        return None

    def traffic(self, model: keras.Model, parameter_bytes: int) -> Any:
        """Bytes its collectives move per step (`sharding.traffic`), or None."""
        return None

    def layout_fields(self, model: keras.Model) -> dict[str, Any]:
        return {}

    def key_value_bytes(self, model: keras.Model) -> list[int]:
        """Each block's keys and values over the whole sequence of the samples a replica holds,
        on one device of the model axis: what a context axis gathers."""
        replicas = max(self.data_axis // self.split.context, 1)
        samples = self.spec.global_batch // replicas
        return key_value_bytes(model, self.sample, samples, self.model_axis)

    @property
    def model_axis(self) -> int:
        """Devices the layers are split over."""
        return 1

    def after_training(self, run: ModelAndBatches) -> None:
        """With a long-sequence option, on the run's first global batch: the compiled step's
        temporaries on one device, read off XLA's memory analysis, and the activations the
        forward keeps for the backward on one device, measured (`sequence_split.py`)."""
        if self.split.given:
            x, y = run.batches[0]
            self.split_fields["step_temporaries_bytes"] = step_temporaries(
                run.model, self.distribution, x, y
            )
            self.split_fields["kept_activation_bytes"] = kept_activations(
                run.model, self.distribution, x, y
            )

    def result_fields(self, run: ModelAndBatches, step_time_s: float | None) -> dict[str, Any]:
        """Memory from the placed shards, bytes from the layout, and the communication measured
        (none measured: measure_comm=False skipped it, or it failed, and the row says so)."""
        model, measured = run.model, self.measured
        state = placed_bytes([*model.weights, *model.optimizer.variables])
        parameter_bytes = sum(nbytes(v) for v in model.trainable_variables)
        extra: dict[str, Any] = {
            "state_bytes": state,
            "parameter_bytes": parameter_bytes,
            "memory": self.memory(model),
            **self.layout_fields(model),
        }
        if self.split_fields:
            extra["sequence_split"] = dict(self.split_fields)
        fields: dict[str, Any] = {"extra": extra}
        traffic = self.traffic(model, parameter_bytes)
        if traffic is not None and self.split.context > 1:
            traffic = with_context(traffic, self.key_value_bytes(model), self.split.context)
            extra["context_bytes"] = traffic.context_bytes
        if traffic is not None:
            extra["traffic_bytes_per_device"] = traffic.traffic_bytes_per_device
            extra["activation_bytes"] = traffic.activation_bytes
            extra["gradient_bytes"] = traffic.gradient_bytes
            fields["comm_bytes"] = traffic.reduced_bytes
        if measured is None and self.record.measures_comm:
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
            extra.update(comm, comm_method=self.method + virtual)
            if self.spec.comm_from is not None:
                extra.update(reuse_fields(self.spec.comm_from))
            fields["comm_time_s"] = exposed
            fields["comm_share"] = exposed / step_time_s if step_time_s else None
        return fields


# Executions a fit on several host devices may queue beyond the last one finished: a plain Keras
# script ran 300 steps with 2 to 16, where an unbounded queue aborted in XLA's collectives
# (recorder.StepTimer).
HOST_EXECUTIONS_AHEAD = 4


def _nothing_to_time() -> dict[str, float]:
    """The timing of a strategy with no communication to measure (one device, single)."""
    return {}


class SingleDevice(JaxStrategy):
    """The model on one device, no distribution: the baseline.

    >>> exp.run(strategy="single", backend="jax")
    """


class DataParallel(JaxStrategy):
    """`keras.distribution.DataParallel` over a 1-D mesh of the run's devices: a replica each,
    the batch split, the gradients summed by XLA.

    >>> exp.run(strategy="data", devices=4, backend="jax")
    """

    method = (
        "exposed: median call of the per-device gradients with minus without their sum over "
        f"devices (jax.shard_map, psum), alternated in {COMM_BLOCKS} blocks of "
        f"{COMM_STEPS_PER_BLOCK} calls, noise: half the range of the blocks' differences; "
        "standalone: the sum alone"
    )

    def __init__(self, spec: RunSpec, devices: list[Any]) -> None:
        super().__init__(spec, devices)
        # Each worker process feeds its own rows (worker/jax/member.py): Keras shards only tf.data.
        self.distribution = keras.distribution.DataParallel(
            devices=devices, auto_shard_dataset=False
        )

    def build(self, builder: Callable[[], keras.Model], sample: Any) -> keras.Model:
        """With a context axis (`context=`), the replicas' devices become (replicas ÷ context,
        context) and each sample's sequence is split over the context axis
        (`sequence_split.py`): the model is read once to find its blocks."""
        split = SequenceSplit.of(self.spec)
        if split.context > 1:
            check_sample(sample, split)
            mesh = device_mesh(self.devices, len(self.devices), 1, split.context)
            mapping = keras.distribution.LayoutMap(mesh)
            probe = builder()
            self.split_fields["activation_layouts"] = add_activation_layouts(mapping, probe, split)
            del probe
            keras.backend.clear_session()
            self.distribution = ContextParallel(
                context=split.context,
                layout_map=mapping,
                batch_dim_name=DATA_AXIS,
                auto_shard_dataset=False,
            )
        return super().build(builder, sample)

    @property
    def data_axis(self) -> int:
        return len(self.devices)

    def describe(self) -> str:
        return "xla all-reduce (DataParallel)"

    def communication_timing(self, model: keras.Model, x: Any, y: Any) -> Timing | None:
        if len(self.devices) < 2:
            return None
        from .comm import context_collectives, data_all_reduce  # noqa: PLC0415

        if self.split.context > 1:  # the activations' layouts keep the model out of shard_map
            self.method = CONTEXT_METHOD
            gradients = sum(nbytes(v) for v in model.trainable_variables)
            return context_collectives(
                self.devices, self.split.context, self.key_value_bytes(model), gradients
            )
        return data_all_reduce(model, self.devices, x, y)

    def traffic(self, model: keras.Model, parameter_bytes: int) -> Any:
        return data_traffic(parameter_bytes, len(self.devices), len(model.trainable_variables))


class TensorParallel(JaxStrategy):
    """`keras.distribution.ModelParallel` over a (data, model) mesh, with the `LayoutMap` the
    kit derives from the model (`sharding/layout.py`) or the user's patterns over it.

    The layout is read off the model, so the model is built twice: once plainly, to read its
    layers and measure its activations on one sample, and once under `ModelParallel`, whose
    `LayoutMap` must exist before the variables do (Keras places each variable as it is
    created). `keras.backend.clear_session()` between the two gives the second build the same
    layer names, hence the same variable paths, and the same seed gives it the same initial
    weights.

    >>> exp.run(strategy="tensor", devices=4, mesh=(2, 2), backend="jax")
    """

    layout_method = (
        "standalone: the layout's collectives alone (activations over the model axis, gradient "
        "shards over the data axis, and the gathers and reduce-scatters of weights a model's own "
        "layout places on the data axis) on arrays of the sizes they move; XLA places them "
        "inside the layers, so no step without them exists to subtract"
    )

    @property
    def method(self) -> str:
        """How the run's collectives are timed; with sequence parallelism, each activation sum
        as the reduce-scatter and all-gather that replace it."""
        if not self.split.sequence_parallel:
            return self.layout_method
        return self.layout_method.replace(
            "activations over the model axis",
            "activations over the model axis, each sum a reduce-scatter and an all-gather "
            "(sequence parallelism)",
        )

    def __init__(self, spec: RunSpec, devices: list[Any]) -> None:
        super().__init__(spec, devices)
        self.layout: Layout | None = None

    def build(self, builder: Callable[[], keras.Model], sample: Any) -> keras.Model:
        data, model_axis = self.spec.mesh_shape
        split = SequenceSplit.of(self.spec)
        check_sample(sample, split, model_axis)
        mesh = device_mesh(self.devices, data, model_axis, split.context)
        probe = builder()
        layers = read_layers(probe, sample)
        self.layers = layers
        # layout_map="own": the model's own get_layout_map (a keras-hub backbone's) over the mesh
        own = own_layout(probe, mesh) if self.spec.layout_map == OWN_LAYOUT else None
        self.layout = self.derive(layers, own)
        mapping = layout_map(self.layout, mesh)
        laid_out = add_activation_layouts(mapping, probe, split)
        norms = sequence_norms(probe, split)  # beside a context axis: over context × model
        self.split_fields["activation_layouts"] = laid_out + len(norms)
        del probe
        keras.backend.clear_session()
        check_divides(self.layout, {DATA_AXIS: data // split.context, MODEL_AXIS: model_axis})
        self.distribution = ContextParallel(
            context=split.context,
            sequence_norms=norms,
            layout_map=mapping,
            batch_dim_name=DATA_AXIS,
            auto_shard_dataset=False,  # each worker process feeds its own rows, as above
        )
        return super().build(builder, sample)

    @property
    def data_axis(self) -> int:
        return self.spec.mesh_shape[0]

    @property
    def model_axis(self) -> int:
        return self.spec.mesh_shape[1]

    def derive(self, layers: list[Any], own: Any = None) -> Layout:
        """The layout over the mesh from the model's layers (`sharding.layout`); the model's own
        (pattern, axes) pairs, where given, win, as the user's do."""
        if own is not None:
            layout = derive_layout(layers, self.spec.mesh_shape[1], own, OWN_LAYOUT)
        else:
            layout = derive_layout(layers, self.spec.mesh_shape[1], self.spec.layout_map)
        return with_experts_split(layout, layers)

    def describe(self) -> str:
        return "xla collectives (ModelParallel)"

    def expert_activation_bytes(self, banks: list[ExpertBank]) -> int:
        """The dense banks' outputs, their experts divided over the model axis where it divides
        them (`with_experts_split`)."""
        model_axis = self.layout.model if self.layout is not None else 1
        return dense_activation_bytes(banks, self.spec.global_batch, (self.data_axis, model_axis))

    def communication_timing(self, model: keras.Model, x: Any, y: Any) -> Timing | None:
        if self.layout is None or len(self.devices) < 2:
            return None
        from .comm import fsdp_collectives, tensor_collectives  # noqa: PLC0415

        data, model_axis = self.spec.mesh_shape
        local = self.spec.global_batch // data
        sizes = [c.elements_per_sample * local * 4 for c in self.layout.collectives]
        gradient_bytes = self.traffic(model, 0).gradient_bytes
        trainable = [p for p in self.layout.placements if p.trainable]
        gathered = [gathered_bytes(p, model_axis) for p in trainable if DATA in p.axes]
        if gathered and data > 1:  # weights on the data axis too: fsdp's, or a model's own
            return fsdp_collectives(
                self.devices, self.spec.mesh_shape, gathered, gradient_bytes, sizes
            )
        return tensor_collectives(
            self.devices, self.spec.mesh_shape, sizes, gradient_bytes, self.split.sequence_parallel
        )

    def traffic(self, model: keras.Model, parameter_bytes: int) -> Any:
        if self.layout is None:
            return None
        return tensor_traffic(self.layout, self.spec.mesh_shape[0], self.spec.global_batch)

    def layout_fields(self, model: keras.Model) -> dict[str, Any]:
        if self.layout is None:
            return {}
        return {
            "layout": [
                {
                    "layer": p.layer,
                    "variable": p.path,
                    "shape": list(p.shape),
                    "axes": [a or "" for a in p.axes],
                    "role": p.role,
                    "shard_shape": shard_shape(model, p.path),
                    "placed_axes": placed_axes(model, p.path),
                    "slot_axes": slot_axes(model, p.path),
                }
                for p in self.layout.placements
            ],
            "collectives": [
                {
                    "layer": c.layer,
                    "direction": c.direction,
                    "why": c.why,
                    "elements_per_sample": c.elements_per_sample,
                }
                for c in self.layout.collectives
            ],
            **self._gathers(model),
        }

    def _gathers(self, model: keras.Model) -> dict[str, int]:
        """The data axis's gathers and reduce-scatters, where the layout puts weights on it."""
        traffic = self.traffic(model, 0)
        if traffic is None or not traffic.all_gather_bytes:
            return {}
        return {
            "all_gather_bytes": traffic.all_gather_bytes,
            "reduce_scatter_bytes": traffic.reduce_scatter_bytes,
        }


class ShardedDataParallel(TensorParallel):
    """Sharded data parallelism (ZeRO-3, FSDP): `ModelParallel` over a (data, model) mesh whose
    `LayoutMap` puts each large weight on the data axis (`strategies.fsdp.shard_over_data`), on
    top of the tensor-parallel layout when the mesh has a model axis. GSPMD gathers each weight
    where a layer uses it and reduce-scatters its gradient; Keras builds the optimizer's slots
    with their weight's layout, so they are sharded alike (`slot_axes` shows it per weight).

    >>> exp.run(strategy="fsdp", devices=4, backend="jax")
    """

    method = (
        "standalone: the layout's collectives alone on arrays of the sizes they move (each "
        "sharded weight gathered twice, forward and backward, and its gradient reduce-scattered "
        "over the data axis; replicated weights' gradients all-reduced; any model-axis "
        "all-reduces); GSPMD places them inside the step, so no step without them exists to "
        "subtract"
    )

    def derive(self, layers: list[Any], own: Any = None) -> Layout:
        data = self.spec.mesh_shape.data // SequenceSplit.of(self.spec).context
        threshold = self.spec.min_shard_bytes
        return shard_over_data(
            super().derive(layers, own), data, MIN_SHARD_BYTES if threshold is None else threshold
        )

    def describe(self) -> str:
        return "xla all-gathers and reduce-scatters (ModelParallel, weights on the batch axis)"

    def traffic(self, model: keras.Model, parameter_bytes: int) -> Any:
        if self.layout is None:
            return None
        return fsdp_traffic(self.layout, self.spec.mesh_shape[0], self.spec.global_batch)

    def layout_fields(self, model: keras.Model) -> dict[str, Any]:
        fields = super().layout_fields(model)
        if self.layout is not None:
            fields.update(self._gathers(model) or dict.fromkeys(_GATHERS, 0))
            fields["min_shard_bytes"] = self.spec.min_shard_bytes
        return fields


_GATHERS = ("all_gather_bytes", "reduce_scatter_bytes")
