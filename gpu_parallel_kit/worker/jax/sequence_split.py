"""A run's long-sequence options on JAX (`strategies/long_sequences.py`): the context axis in
the device mesh, the layouts of the blocks' activations, and the layers recomputed in the
backward.

- **Context**: the mesh's data axis of D devices becomes (D ÷ c replicas, c context devices);
  `ContextParallel` lays every input of a sequence out along the context axis too, and each
  Transformer block's output keeps that layout (a `LayoutMap` entry for the block's output,
  which Keras applies as the block returns). XLA propagates it through the block and gathers
  the keys and values over the context axis where attention needs the whole sequence.
- **Sequence parallelism**: each block's norms give their output split along the sequence over
  the model axis; XLA turns the tensor-parallel all-reduces around them into reduce-scatters
  and all-gathers.
- **Recomputation**: each chosen layer's call runs under `jax.checkpoint`, its arguments that
  are not arrays (a `training` flag, a `None` cache) held fixed, so the backward computes its
  activations again instead of keeping them. Keras's `RematScope` would checkpoint the same
  calls but traces the `training` flag, which keras-hub's attention reads as a Python bool.

Every layout is a placement, not a change to the arithmetic: a run equals one device's.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jax
import keras
import numpy as np

from ...errors import GpkError
from ...strategies.fsdp import DATA_AXIS, MODEL_AXIS
from ...strategies.long_sequences import Checkpointing, SequenceSplit
from .plan_count import every_layer, structure

CONTEXT_AXIS = "context"
# One batch of a model's inputs (or labels): an array, or a dict or list of arrays.
Inputs = np.ndarray | dict[str, np.ndarray] | list[np.ndarray]


def device_mesh(
    devices: list[jax.Device], data: int, model: int, context: int
) -> keras.distribution.DeviceMesh:
    """The (data, model) mesh, or with a context axis (data ÷ context, context, model)."""
    if context == 1:
        return keras.distribution.DeviceMesh((data, model), (DATA_AXIS, MODEL_AXIS), devices)
    return keras.distribution.DeviceMesh(
        (data // context, context, model), (DATA_AXIS, CONTEXT_AXIS, MODEL_AXIS), devices
    )


class ContextParallel(keras.distribution.ModelParallel):
    """`ModelParallel` whose inputs of a sequence (two axes or more) are split along it over the
    context axis, as well as along the batch over the data axis.

    `sequence_norms` are patterns of the paths of norms whose outputs are split along the
    sequence over the context and model axes together (sequence parallelism beside a context
    axis): a `LayoutMap` entry names one mesh axis a dimension, so these are laid out here.
    """

    def __init__(self, *, context: int, sequence_norms: tuple[str, ...] = (), **options: Any):
        super().__init__(**options)
        self.context = context
        self.sequence_norms = sequence_norms

    def get_tensor_layout(self, path: str) -> Any:
        if any(re.search(pattern, path) for pattern in self.sequence_norms):
            spec = jax.sharding.PartitionSpec(DATA_AXIS, (CONTEXT_AXIS, MODEL_AXIS), None)
            return jax.sharding.NamedSharding(self.device_mesh.backend_mesh, spec)
        return super().get_tensor_layout(path)

    def get_data_layout(self, data_shape: tuple[int, ...]) -> keras.distribution.TensorLayout:
        layout = super().get_data_layout(data_shape)
        if self.context == 1 or len(data_shape) < 2:
            return layout
        axes = list(layout.axes)
        axes[1] = CONTEXT_AXIS
        return keras.distribution.TensorLayout(axes, self.device_mesh)


def key_value_bytes(model: keras.Model, sample: Inputs, samples: int, model_axis: int) -> list[int]:
    """Each Transformer block's keys and values over the whole sequence of `samples` samples, in
    float32 bytes, as one device of a `model_axis` tensor axis holds them (the heads split over
    it): what a context axis gathers (`sharding.traffic.with_context`)."""
    said = structure(model)
    if not said:
        return []
    lengths = _sequence_lengths(sample)
    width = said["hidden"] * said.get("kv_heads", said["heads"]) // said["heads"]
    per_block = samples * max(lengths, default=0) * 2 * width * 4 // model_axis
    return [per_block] * int(said["blocks"])


def check_sample(sample: Inputs, split: SequenceSplit, model: int = 1) -> None:
    """Every input with a sequence axis splits evenly over the context axis (and, with sequence
    parallelism beside it, over the context and `model` axes together): one sentence naming the
    length and the fix otherwise."""
    if split.context == 1:
        return
    lengths = set(_sequence_lengths(sample))
    if not lengths:
        raise GpkError(
            f"context={split.context} splits a sequence, and the model's inputs have none (one "
            "axis a sample); drop context="
        )
    for length in sorted(lengths):
        if length % split.context:
            raise GpkError(
                f"context={split.context} does not divide the sequence of {length}; give a "
                f"divisor of {length}, or a sequence a multiple of {split.context}"
            )
        parts = split.context * model
        if split.sequence_parallel and length % parts:
            raise GpkError(
                f"sequence_parallel=True beside context={split.context} splits the sequence of "
                f"{length} over {parts} devices (context × model axis), which does not divide "
                f"it; give a sequence a multiple of {parts}, or drop sequence_parallel="
            )


def _sequence_lengths(sample: Inputs) -> list[int]:
    """The sequence length of each input with a sequence axis (two axes or more)."""
    return [int(a.shape[1]) for a in keras.tree.flatten(sample) if len(a.shape) >= 2]


def add_activation_layouts(
    mapping: keras.distribution.LayoutMap, model: keras.Model, split: SequenceSplit
) -> int:
    """Put the blocks' activations on the mesh as the split needs (see the module), in the
    `LayoutMap` `mapping`; the entries added."""
    if split.context == 1 and not split.sequence_parallel:
        return 0
    blocks = _blocks(model)
    if not blocks:
        raise GpkError(
            f"{model.name} has no Transformer blocks to split along the sequence (neither a "
            "keras-hub backbone nor several attention layers); drop "
            + ("context=" if split.context > 1 else "sequence_parallel=")
        )
    added = 0
    for block in blocks:
        name = re.escape(block.name)
        if split.context > 1:
            mapping[f"(^|/){name}/output$"] = (DATA_AXIS, CONTEXT_AXIS, None)
            added += 1
        if split.sequence_parallel and split.context == 1:
            for pattern in _norm_paths(block):
                mapping[pattern] = (DATA_AXIS, MODEL_AXIS, None)
                added += 1
    return added


def sequence_norms(model: keras.Model, split: SequenceSplit) -> tuple[str, ...]:
    """The path patterns of the blocks' norms that sequence parallelism beside a context axis
    splits over the context and model axes together (`ContextParallel`); none otherwise."""
    if not (split.sequence_parallel and split.context > 1):
        return ()
    return tuple(pattern for block in _blocks(model) for pattern in _norm_paths(block))


def _norm_paths(block: keras.layers.Layer) -> list[str]:
    """A pattern of each norm's output path inside `block`."""
    name = re.escape(block.name)
    return [f"(^|/){name}/(.*/)?{re.escape(norm.name)}/output$" for norm in _norms(block)]


@dataclass(frozen=True)
class StageActivations:
    """A pipeline stage's layouts of its blocks' activations over its own sub-mesh."""

    distribution: keras.distribution.Distribution  # its scope lays out each layer's output
    layouts: int  # the `LayoutMap` entries, over the whole model's blocks


def stage_activations(
    model: keras.Model, devices: list[jax.Device], data: int, tensor: int, split: SequenceSplit
) -> StageActivations | None:
    """A pipeline stage's layouts of its blocks' activations over its (data, model) sub-mesh,
    as `add_activation_layouts` gives a whole mesh; the stage traces its layers in the
    distribution's scope, and Keras lays out each layer's output as it returns. None where the
    split lays out none."""
    if not split.sequence_parallel:
        return None
    mapping = keras.distribution.LayoutMap(device_mesh(devices, data, tensor, 1))
    layouts = add_activation_layouts(mapping, model, split)
    if not layouts:
        return None
    distribution = keras.distribution.ModelParallel(layout_map=mapping, batch_dim_name=DATA_AXIS)
    return StageActivations(distribution, layouts)


def recompute_layers(model: keras.Model, split: SequenceSplit) -> int:
    """Run the layers the split recomputes under `jax.checkpoint`: each attention layer
    (selective) or each block (full); the layers wrapped. One sentence for a model with none."""
    if split.checkpointing == Checkpointing.NONE:
        return 0
    if split.checkpointing == Checkpointing.SELECTIVE:
        chosen, what = _outermost(_attention_layers(model)), "attention layers"
    else:
        chosen, what = _blocks(model), "Transformer blocks"
    if not chosen:
        raise GpkError(
            f"checkpointing={split.checkpointing.value!r} recomputes {what}, and {model.name} "
            "has none; drop checkpointing="
        )
    for layer in chosen:
        layer.call = checkpointed(layer.call)
    return len(chosen)


def checkpointed(call: Callable[..., Any]) -> Callable[..., Any]:
    """`call` under `jax.checkpoint`, its arguments that are not arrays held fixed."""

    @functools.wraps(call)
    def run(*args: Any, **kwargs: Any) -> Any:
        fixed = {k: _fixed(v) for k, v in kwargs.items() if _is_fixed(v)}
        traced = {k: v for k, v in kwargs.items() if not _is_fixed(v)}
        return jax.checkpoint(lambda *a, **k: call(*a, **k, **fixed))(*args, **traced)

    return run


def placed_batch(distribution: keras.distribution.Distribution | None, batch: Any) -> Any:
    """A global batch's arrays on the devices, laid out as the run lays them out (on the
    default device without a distribution)."""

    def placed(array: np.ndarray) -> jax.Array:
        if distribution is None:
            return jax.device_put(array)
        return jax.device_put(array, distribution.get_data_layout(array.shape).backend_layout)

    return keras.tree.map_structure(placed, batch)


def compiled_step(
    model: keras.Model,
    distribution: keras.distribution.Distribution | None,
    x: Inputs,
    y: Inputs,
) -> Any:
    """Keras's own training step compiled for one global batch laid out as the run lays it out
    (`fit`'s program, for XLA's memory and cost analyses)."""
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )
    batch = placed_batch(distribution, (x, y))
    with distribution.scope() if distribution is not None else _nothing():
        return jax.jit(model.train_step).lower(state, batch).compile()


def step_temporaries(
    model: keras.Model,
    distribution: keras.distribution.Distribution | None,
    x: Inputs,
    y: Inputs,
) -> int | None:
    """The bytes of temporaries XLA gives one device for the compiled training step on one
    global batch laid out as the run lays it out (its activations kept for the backward, and
    what else the step holds at its peak); None where the backend does not say."""
    try:
        compiled = compiled_step(model, distribution, x, y)
        return int(compiled.memory_analysis().temp_size_in_bytes)
    except (AttributeError, NotImplementedError, TypeError):
        return None


def kept_activations(
    model: keras.Model,
    distribution: keras.distribution.Distribution | None,
    x: Inputs,
    y: Inputs,
) -> int | None:
    """The bytes one device holds from the forward for the backward, measured: the model's
    forward and loss run once on one global batch laid out as the run lays it out, under
    `jax.vjp`, and the arrays its pullback keeps (the weights and the batch left out) summed
    over the first device's shards. What JAX's autodiff keeps, layer by layer, before XLA's
    fusion may rebuild the cheapest of them; None where the backend does not say."""
    trainable = [v.value for v in model.trainable_variables]
    frozen = [v.value for v in model.non_trainable_variables]

    inputs, labels = placed_batch(distribution, (x, y))

    def objective(weights: list[jax.Array]) -> jax.Array:
        predicted, _ = model.stateless_call(weights, frozen, inputs, training=True)
        with keras.StatelessScope():  # the loss's trackers keep their state
            return model.compute_loss(x=inputs, y=labels, y_pred=predicted)

    try:
        with distribution.scope() if distribution is not None else _nothing():
            _, pullback = jax.vjp(objective, trainable)
    except (AttributeError, NotImplementedError, TypeError):
        return None
    given = {id(a) for a in [*trainable, *frozen, *keras.tree.flatten((inputs, labels))]}
    device = (trainable or keras.tree.flatten(inputs))[0].addressable_shards[0].device
    return sum(
        shard.data.nbytes
        for kept in jax.tree.leaves(pullback)
        if isinstance(kept, jax.Array) and id(kept) not in given
        for shard in kept.addressable_shards
        if shard.device == device
    )


@contextlib.contextmanager
def _nothing() -> Iterator[None]:
    yield


def _is_fixed(value: object) -> bool:
    if value is None or isinstance(value, bool | int | float | str):
        return True
    # Keras passes `training` as a concrete boolean array: a Python bool to the layer.
    return getattr(value, "ndim", None) == 0 and str(getattr(value, "dtype", "")) == "bool"


def _fixed(value: object) -> object:
    return bool(value) if getattr(value, "ndim", None) == 0 else value


def _inside(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """Every layer inside `layer`, depth first, `layer` itself left out."""
    return every_layer(layer)[1:]


def _blocks(model: keras.Model) -> list[keras.layers.Layer]:
    """The model's Transformer blocks, by the names `plan_count.structure` reads."""
    names = set((structure(model) or {}).get("block_names") or [])
    return [layer for layer in _inside(model) if layer.name in names]


def _attention_layers(model: keras.Model) -> list[keras.layers.Layer]:
    return [layer for layer in _inside(model) if type(layer).__name__.endswith("Attention")]


def _outermost(layers: list[keras.layers.Layer]) -> list[keras.layers.Layer]:
    """Those not inside another of them (an attention layer's own inner attention)."""
    inner = {id(child) for layer in layers for child in _inside(layer)}
    return [layer for layer in layers if id(layer) not in inner]


def _norms(block: keras.layers.Layer) -> list[keras.layers.Layer]:
    return [layer for layer in _inside(block) if "Norm" in type(layer).__name__]
