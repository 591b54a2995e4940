"""What a JAX run's collectives cost, measured in its own worker after training.

Each function compiles its executables before the first timed step, beside the run's set-up
(compiling after training would hold up the comparison's next run), and times them after it.
Data parallel gives the *exposed* reduction: the per-device gradients on one real batch with and
without `psum` (`jax.shard_map`), alternated in blocks, as the TensorFlow data engine does
(`worker/tensorflow/engines/comm.py`). Tensor and fsdp give their layout's collectives timed
*standalone* on arrays of the sizes they move, an upper bound on what they expose, since XLA
places them inside the layers. On host devices these are runtime costs on shared cores, not a
network's. Nothing here changes the model.
"""

from __future__ import annotations

import inspect
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ...strategies.fsdp import DATA_AXIS, MODEL_AXIS
from ..measuring.stats import COMM_BLOCKS, COMM_STEPS_PER_BLOCK, Timing, communication_figures
from .sequence_split import CONTEXT_AXIS as CONTEXT


def data_all_reduce(model: Any, devices: Sequence[Any], x: Any, y: Any) -> Timing:
    """Exposed and standalone gradient all-reduce of a data-parallel step on `devices`, timed on
    the model's weights as they are when the timing is called."""
    mesh = Mesh(np.asarray(devices), (DATA_AXIS,))
    non_trainable = [v.value for v in model.non_trainable_variables]
    # `stateless_call` hands its keywords to `call` as they are (`__call__` would drop a
    # `training` the user's `call` does not take): pass it only where `call` has it.
    inference = (
        {"training": False} if "training" in inspect.signature(model.call).parameters else {}
    )

    def local_gradients(weights, x, y):
        def loss_of(weights):
            y_pred, _ = model.stateless_call(weights, non_trainable, x, **inference)
            return model.compute_loss(x=x, y=y, y_pred=y_pred, training=False)

        return jax.grad(loss_of)(weights)

    replicated = P()
    batch = P(DATA_AXIS)

    # One executable for both sides of the difference: the gradients, then the sum over devices
    # or not, as a replicated flag says. XLA compiles the model's backward pass once instead of
    # twice (0.2-0.3 s on two cores for a small MLP), and both sides run the same code up to
    # the branch, so the difference is the reduction's alone.
    @jax.jit
    def gradients(weights, x, y, reduce):
        def local(w, x, y, reduce):
            grads = local_gradients(w, x, y)
            summed = jax.lax.cond(
                reduce[0], lambda g: jax.lax.psum(g, DATA_AXIS), lambda g: g, grads
            )
            return [g[None] for g in summed]

        return jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(replicated, batch, batch, replicated),
            out_specs=batch,
            check_vma=False,
        )(weights, x, y, reduce)

    @jax.jit
    def reduce_only(stacked):
        return jax.shard_map(
            lambda g: jax.lax.psum([s[0] for s in g], DATA_AXIS),
            mesh=mesh,
            in_specs=(batch,),
            out_specs=replicated,
            check_vma=False,
        )(stacked)

    data = (_on_mesh(x, mesh, batch), _on_mesh(y, mesh, batch))
    flags = [_on_mesh(np.array([flag]), mesh, replicated) for flag in (False, True)]

    def arguments(reduce: Any) -> tuple[Any, ...]:
        return ([v.value for v in model.trainable_variables], *data, reduce)

    stacked = _ready(gradients(*arguments(flags[0])))  # compiles; the standalone sums these
    _ready(gradients(*arguments(flags[1])))
    _ready(reduce_only(stacked))

    def timed() -> dict[str, float]:
        without, with_sum = arguments(flags[0]), arguments(flags[1])
        plain, reduced = [], []
        for _ in range(COMM_BLOCKS):
            plain.append(_per_call(gradients, without))
            reduced.append(_per_call(gradients, with_sum))
        standalone = statistics.median(
            _per_call(reduce_only, (stacked,)) for _ in range(COMM_BLOCKS)
        )
        return communication_figures(plain, reduced, standalone)

    return timed


def tensor_collectives(
    devices: Sequence[Any],
    mesh_shape: tuple[int, int],
    activation_bytes: Sequence[int],
    gradient_bytes: int,
    sequence_parallel: bool = False,
) -> Timing:
    """The layout's collectives alone: each activation sum over the model axis (with sequence
    parallelism, the reduce-scatter and the all-gather that replace it, on the same bytes),
    then the gradient shards over the data axis; median of blocks, and half their range as the
    noise."""
    data, model = mesh_shape
    mesh = Mesh(np.asarray(devices).reshape(data, model), (DATA_AXIS, MODEL_AXIS))
    # float32 elements per device, a multiple of the model axis so a reduce-scatter splits them
    sizes = [max(model, n // 4 // model * model) for n in activation_bytes]
    stacked = [
        jax.device_put(
            jnp.ones((data, model, n), jnp.float32), NamedSharding(mesh, P(DATA_AXIS, MODEL_AXIS))
        )
        for n in sizes
    ]
    gradients = jax.device_put(
        jnp.ones((data, max(1, gradient_bytes // 4)), jnp.float32),
        NamedSharding(mesh, P(DATA_AXIS)),
    )

    def summed(activation: Any) -> Any:
        if not sequence_parallel:
            return jax.lax.psum(activation, MODEL_AXIS)
        # Korthikanti et al.'s pair: the sum scattered along the sequence, then gathered whole
        part = jax.lax.psum_scatter(activation, MODEL_AXIS, scatter_dimension=2, tiled=True)
        return jax.lax.all_gather(part, MODEL_AXIS, axis=2, tiled=True)

    @jax.jit
    def collectives(stacked, gradients):
        def local(stacked, gradients):
            sums = [summed(s) for s in stacked]
            return sums, jax.lax.psum(gradients, DATA_AXIS) if data > 1 else gradients

        return jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P(DATA_AXIS, MODEL_AXIS), P(DATA_AXIS)),
            out_specs=(P(DATA_AXIS), P()),
            check_vma=False,
        )(stacked, gradients)

    name = "standalone_collectives_s" if sequence_parallel else "standalone_all_reduce_s"
    return _blocks_of(collectives, (stacked, gradients), name)


def fsdp_collectives(
    devices: Sequence[Any],
    mesh_shape: tuple[int, int],
    gathered_bytes: Sequence[int],
    replicated_bytes: int,
    activation_bytes: Sequence[int],
) -> Timing:
    """A sharded data-parallel step's collectives alone: each sharded weight all-gathered over
    the data axis twice (forward, backward; two arrays, so XLA cannot merge them) and its
    gradient reduce-scattered, the replicated gradients summed over the data axis and any
    activations over the model axis; median of blocks, and half their range as the noise."""
    data, model = mesh_shape
    mesh = Mesh(np.asarray(devices).reshape(data, model), (DATA_AXIS, MODEL_AXIS))
    spread = NamedSharding(mesh, P(DATA_AXIS, MODEL_AXIS))

    def per_device(elements: int) -> Any:
        return jax.device_put(jnp.ones((data, model, max(1, elements)), jnp.float32), spread)

    held = [max(1, -(-n // (4 * data))) for n in gathered_bytes]  # float32 elements per shard
    shards = [per_device(e) for e in held]  # what each device holds
    again = [per_device(e) for e in held]
    full = [per_device(e * data) for e in held]  # a gathered weight's gradient
    replicated = per_device(replicated_bytes // 4)
    activations = [per_device(n // 4) for n in activation_bytes]

    @jax.jit
    def collectives(shards, again, full, replicated, activations):
        def local(shards, again, full, replicated, activations):
            forward = [jax.lax.all_gather(s, DATA_AXIS, axis=2, tiled=True) for s in shards]
            backward = [jax.lax.all_gather(s, DATA_AXIS, axis=2, tiled=True) for s in again]
            scattered = [
                jax.lax.psum_scatter(g, DATA_AXIS, scatter_dimension=2, tiled=True) for g in full
            ]
            summed = jax.lax.psum(replicated, DATA_AXIS) if data > 1 else replicated
            acts = [jax.lax.psum(a, MODEL_AXIS) for a in activations] if model > 1 else activations
            return forward, backward, scattered, summed, acts

        inner = P(DATA_AXIS, MODEL_AXIS)
        return jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(inner,) * 5,
            out_specs=(inner,) * 5,
            check_vma=False,
        )(shards, again, full, replicated, activations)

    arguments = (shards, again, full, replicated, activations)
    return _blocks_of(collectives, arguments, "standalone_collectives_s")


def context_collectives(
    devices: Sequence[Any], context: int, key_value_bytes: Sequence[int], gradient_bytes: int
) -> Timing:
    """A data step with a context axis, its collectives alone: each block's keys and values
    gathered over the context axis and their gradients reduce-scattered back, and the gradients
    summed over every device; median of blocks, and half their range as the noise. (The model's
    own backward cannot run per device here: its activations carry the context axis's layout.)"""
    replicas = len(devices) // context
    mesh = Mesh(np.asarray(devices).reshape(replicas, context), (DATA_AXIS, CONTEXT))
    spread = NamedSharding(mesh, P(DATA_AXIS, CONTEXT))

    def per_device(elements: int) -> Any:
        return jax.device_put(jnp.ones((replicas, context, max(1, elements)), jnp.float32), spread)

    chunks = [per_device(n // (4 * context)) for n in key_value_bytes]  # a device's chunk
    gathered = [per_device(n // 4) for n in key_value_bytes]  # their gradients, whole
    gradients = per_device(gradient_bytes // 4)

    @jax.jit
    def collectives(chunks, gathered, gradients):
        def local(chunks, gathered, gradients):
            forward = [jax.lax.all_gather(c, CONTEXT, axis=2, tiled=True) for c in chunks]
            backward = [
                jax.lax.psum_scatter(g, CONTEXT, scatter_dimension=2, tiled=True) for g in gathered
            ]
            return forward, backward, jax.lax.psum(gradients, (DATA_AXIS, CONTEXT))

        inner = P(DATA_AXIS, CONTEXT)
        return jax.shard_map(
            local, mesh=mesh, in_specs=(inner,) * 3, out_specs=(inner,) * 3, check_vma=False
        )(chunks, gathered, gradients)

    return _blocks_of(collectives, (chunks, gathered, gradients), "standalone_collectives_s")


def _blocks_of(collectives: Callable[..., Any], arguments: tuple[Any, ...], name: str) -> Timing:
    """Compile and run `collectives` once now; the timing: median of blocks, and half their
    range as the noise."""
    _ready(collectives(*arguments))

    def timed() -> dict[str, float]:
        blocks = [_per_call(collectives, arguments) for _ in range(COMM_BLOCKS)]
        median, noise = statistics.median(blocks), (max(blocks) - min(blocks)) / 2
        return {"comm_time_s": median, "comm_noise_s": noise, name: median}

    return timed


def _on_mesh(value: Any, mesh: Mesh, spec: P) -> Any:
    return jax.tree.map(lambda a: jax.device_put(np.asarray(a), NamedSharding(mesh, spec)), value)


def _ready(outputs: Any) -> Any:
    """Wait for the call's work to finish: JAX dispatches asynchronously, on every device."""
    return jax.block_until_ready(outputs)


def _per_call(function: Callable[..., Any], arguments: tuple[Any, ...]) -> float:
    start = time.perf_counter()
    for _ in range(COMM_STEPS_PER_BLOCK):
        _ready(function(*arguments))
    return (time.perf_counter() - start) / COMM_STEPS_PER_BLOCK
