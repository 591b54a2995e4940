"""Dispatched experts: a mixture of experts' tokens sent to the devices of the experts their router
picks, computed there and sent back, as Megatron-Core, MaxText and DeepSpeed-MoE train.

keras-hub's expert banks are dense: every expert computes every token, and the router's top-k
weights zero the rest, so a block costs experts ÷ top-k times the FLOPs of the tokens routed.
`DispatchedExperts` computes only the routed tokens, inside `jax.shard_map` over the run's
(data, expert) mesh:

1. Each device takes its slice of the tokens (the batch split over both axes) and gives each
   (token, choice) a slot in its expert's buffer, first choices before second ones (GShard's
   order), up to `capacity` slots per expert; a token beyond them is dropped from that expert
   (its residual carries it on) and counted.
2. `jax.lax.all_to_all` over the expert axis sends each expert's buffer to the device holding
   it, which runs its local experts on the slots of every device, and a second all-to-all
   returns them.
3. Each token's outputs are weighted by its router probabilities and summed.

The expert's feed-forward is read off its kernels' shapes: three (E, width, F), (E, width, F),
(E, F, width) kernels are Mixtral's gate, up and down; two (E, width, 2F), (E, F, width) are
Qwen-MoE's fused gate-and-up and down. `swap_in` replaces each keras-hub MoE block's call with
one that routes as the block does (softmax, top-k, normalised where the block normalises), keeps
its load-balancing loss, and hands the tokens to `DispatchedExperts`. The block's weights, their
paths and their layout stay as they are: the same weights train, only the work differs.

>>> layers = swap_in(moe_blocks(model, banks), mesh, capacity_factor=1.25)
>>> dropped_tokens(layers, model, x)        # (dropped, routed) on one batch
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import keras
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P
from keras import ops

from ...errors import GpkError
from ...sharding.experts import ExpertBank, capacity_per_expert
from ...sharding.traffic import DATA
from .keras_internals import sublayers

EXPERT = "model"  # the mesh's expert axis, as keras.distribution names it


class DispatchedExperts(keras.layers.Layer):
    """The routed tokens only, through the experts of a stacked bank, over a (data, expert) mesh.

    Args:
        kernels: the bank's stacked kernels (Keras variables), (experts, ..., ...), in the
            bank's order; they stay the bank's: this layer adds no weights.
        mesh: the run's `jax.sharding.Mesh`, axes ("batch", "model"), the second the experts'.
        capacity_factor: each expert keeps capacity_factor × tokens × top-k ÷ experts slots
            for the tokens of each device.
        activation: the bank's activation.

    Call arguments:
        tokens: (tokens, width).
        chosen: (tokens, top_k) int, the experts each token's router picked.
        weights: (tokens, top_k), their router weights.

    Returns:
        (tokens, width): each token's experts' outputs, weighted and summed.
    """

    def __init__(self, kernels, mesh, capacity_factor, activation, **kwargs):
        super().__init__(**kwargs)
        self.kernels = list(kernels)
        self.mesh = mesh
        self.capacity_factor = capacity_factor
        self.expert_activation = activation
        self.experts = int(self.kernels[0].shape[0])
        self.tally: list[tuple[int, int]] | None = None  # (dropped, routed) of eager calls
        _feed_forward(self.kernels, activation)  # refuses a bank it cannot read, now

    def capacity(self, tokens: int, top_k: int) -> int:
        """Slots per expert for the `tokens` of one device."""
        return capacity_per_expert(tokens, top_k, self.experts, self.capacity_factor)

    def call(self, tokens, chosen, weights):
        devices = self.mesh.devices.size
        total, top_k = int(tokens.shape[0]), int(chosen.shape[1])
        if total % devices:
            raise GpkError(
                f"dispatched experts split the {total} tokens of a batch over {devices} "
                f"devices, which does not divide them; use a batch size whose tokens "
                f"{devices} divides, or experts='dense'"
            )
        slots = self.capacity(total // devices, top_k)
        local = _local_dispatch(
            slots,
            self.experts,
            self.mesh.shape[EXPERT],
            _feed_forward(self.kernels, self.expert_activation),
        )
        spread = P((DATA, EXPERT))
        kernel_spec = tuple(P(EXPERT) for _ in self.kernels)
        output, dropped = jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(spread, spread, spread, kernel_spec),
            out_specs=(spread, P()),
        )(tokens, chosen.astype("int32"), weights, tuple(k.value for k in self.kernels))
        if self.tally is not None and not isinstance(dropped, jax.core.Tracer):
            self.tally.append((int(dropped), total * top_k))
        return output


def _local_dispatch(slots: int, experts: int, expert_devices: int, feed_forward):
    """One device's part: its tokens into its experts' buffers, the exchange, its local experts,
    the exchange back, and its tokens' weighted sums."""
    local_experts = experts // expert_devices

    def local(tokens, chosen, weights, kernels):
        count, width = tokens.shape
        top_k = chosen.shape[1]
        # (choice, token) order: every token's first choice gets a slot before any second one.
        expert = chosen.T.reshape(-1)
        weight = weights.T.reshape(-1)
        source = jnp.tile(jnp.arange(count), top_k)
        one_hot = jax.nn.one_hot(expert, experts, dtype=jnp.int32)
        position = jnp.sum((jnp.cumsum(one_hot, axis=0) - 1) * one_hot, axis=1)
        kept = position < slots
        slot = jnp.where(kept, expert * slots + position, experts * slots)  # the last: dropped
        buffer = jnp.zeros((experts * slots + 1, width), tokens.dtype).at[slot].add(tokens[source])
        buffer = buffer[:-1].reshape(expert_devices, local_experts, slots, width)
        received = jax.lax.all_to_all(buffer, EXPERT, 0, 0, tiled=True)
        # (local experts, every device's slots, width) through the local experts
        mine = received.transpose(1, 0, 2, 3).reshape(local_experts, -1, width)
        computed = feed_forward(mine, kernels)
        computed = computed.reshape(local_experts, expert_devices, slots, width)
        returned = jax.lax.all_to_all(computed.transpose(1, 0, 2, 3), EXPERT, 0, 0, tiled=True)
        outputs = jnp.concatenate(
            [returned.reshape(experts * slots, width), jnp.zeros((1, width), tokens.dtype)]
        )
        weighted = outputs[slot] * weight[:, None].astype(tokens.dtype)
        combined = weighted.reshape(top_k, count, width).sum(axis=0)
        dropped = jax.lax.psum(jnp.sum(~kept), (DATA, EXPERT))
        return combined, dropped

    return local


def _feed_forward(kernels: Sequence[Any], activation):
    """The experts' gated feed-forward on (experts, slots, width) tokens, read off the kernels'
    shapes; one sentence for a bank laid out otherwise."""
    shapes = [tuple(int(d) for d in k.shape) for k in kernels]
    if (
        len(shapes) == 3
        and shapes[0] == shapes[1]
        and shapes[2]
        == (
            shapes[0][0],
            shapes[0][2],
            shapes[0][1],
        )
    ):

        def gate_up_down(tokens, kernels):  # Mixtral: act(x·gate) × (x·up), then ·down
            gate = activation(jnp.einsum("eth,ehm->etm", tokens, kernels[0]))
            up = jnp.einsum("eth,ehm->etm", tokens, kernels[1])
            return jnp.einsum("etm,emh->eth", gate * up, kernels[2])

        return gate_up_down
    if len(shapes) == 2 and shapes[0][2] == 2 * shapes[1][1] and shapes[0][1] == shapes[1][2]:

        def fused(tokens, kernels):  # Qwen-MoE: (x·[gate up]) split, up × act(gate), then ·down
            gate, up = jnp.split(jnp.einsum("eth,ehm->etm", tokens, kernels[0]), 2, axis=-1)
            return jnp.einsum("etm,emh->eth", up * activation(gate), kernels[1])

        return fused
    raise GpkError(
        f"experts='dispatched' reads an expert bank's gated feed-forward from its kernels' "
        f"shapes, (E, width, F) twice and (E, F, width), or (E, width, 2F) and (E, F, width), "
        f"but this bank's are {shapes}; use experts='dense'"
    )


@dataclass(frozen=True)
class MoeBlock:
    """A built MoE block of the model: the layer, its router layer and its expert bank's."""

    layer: Any
    router: Any
    bank: Any
    kernels: tuple[Any, ...]  # the bank's stacked kernels, in its order

    @property
    def top_k(self) -> int | None:
        """The experts each token is sent to: the block's `top_k`, as keras-hub names it."""
        return getattr(self.layer, "top_k", None)


def moe_blocks(model: keras.Model, banks: Sequence[ExpertBank]) -> list[MoeBlock]:
    """The built blocks holding `banks`, in the banks' order: each the layer that holds both a
    Dense layer whose kernel is a bank's router and the layer whose weights are its experts."""
    found: dict[str, MoeBlock] = {}
    by_router = {bank.router: bank for bank in banks}
    for block in _layers(model):
        children = sublayers_of(block)
        for router in children:
            kernel = getattr(router, "kernel", None)
            if not isinstance(router, keras.layers.Dense) or kernel is None:
                continue
            bank = by_router.get(kernel.path)
            paths = {k.path for k in bank.kernels} if bank is not None else set()
            owner = next((c for c in children if {v.path for v in c.weights} == paths), None)
            if bank is not None and owner is not None:
                kernels = tuple(v for v in owner.weights if v.path in paths)
                found[bank.router] = MoeBlock(block, router, owner, kernels)
    missing = [bank.layer for bank in banks if bank.router not in found]
    if missing:
        raise GpkError(
            f"strategy='expert' found expert kernels in {missing[0]!r} but no layer holding "
            "both its router (a Dense layer) and its expert bank; build the block as keras-hub "
            "does (router and bank layers in one block), or use strategy='tensor'"
        )
    return [found[bank.router] for bank in banks]


def swap_in(blocks: Sequence[MoeBlock], mesh: Mesh, capacity_factor: float) -> list[Any]:
    """Each of `blocks` made to route its tokens through a `DispatchedExperts`; the layers, in
    the blocks' order."""
    swapped = []
    for block in blocks:
        dispatched = DispatchedExperts(
            block.kernels,
            mesh,
            capacity_factor,
            _activation(block.bank),
            name=f"{block.layer.name}_dispatched",
        )
        dispatched.top_k = block.top_k
        block.layer.__dict__["call"] = _routed_call(block.layer, block.router, dispatched)
        swapped.append(dispatched)
    return swapped


def _layers(layer: Any):
    yield layer
    for child in sublayers_of(layer):
        yield from _layers(child)


def sublayers_of(layer: Any) -> list[Any]:
    try:
        return sublayers(layer)
    except GpkError:
        return []


def _activation(bank: Any):
    activation = getattr(bank, "activation", None)
    if activation is None:
        raise GpkError(
            f"experts='dispatched' needs the expert bank {bank.name!r}'s activation and found "
            "none; use experts='dense'"
        )
    return activation


def _routing(block: Any) -> tuple[int, int, bool, float, Any]:
    """What a keras-hub MoE block routes by, from its constructor's arguments: experts, top-k,
    whether it normalises the top-k weights (Mixtral always, Qwen-MoE if `norm_top_k_prob`), its
    load-balancing loss's coefficient and function (its module's
    `compute_load_balancing_loss`)."""
    experts, top_k = getattr(block, "num_experts", None), getattr(block, "top_k", None)
    coefficient = getattr(
        block, "router_aux_loss_coef", getattr(block, "router_aux_loss_coefficient", None)
    )
    loss = getattr(sys.modules.get(type(block).__module__), "compute_load_balancing_loss", None)
    if None in (experts, top_k, coefficient, loss):
        raise GpkError(
            f"experts='dispatched' routes as keras-hub's Mixtral and Qwen-MoE blocks do, but "
            f"{type(block).__name__} lacks their num_experts, top_k, aux loss coefficient or "
            "load-balancing loss; use experts='dense'"
        )
    if getattr(block, "router_jitter_noise", 0):
        raise GpkError(
            f"experts='dispatched' routes without jitter, but {block.name!r} has "
            f"router_jitter_noise={block.router_jitter_noise}; build it with "
            "router_jitter_noise=0, or use experts='dense'"
        )
    return experts, top_k, bool(getattr(block, "norm_top_k_prob", True)), coefficient, loss


def _routed_call(block: Any, router: Any, dispatched: DispatchedExperts):
    """The block's call, routing as keras-hub's does, the experts dispatched."""
    experts, top_k, normalise, coefficient, load_balancing = _routing(block)

    def call(hidden_states, attention_mask=None, training=None):
        batch, sequence, width = hidden_states.shape
        flat = ops.reshape(hidden_states, (-1, width))
        logits = router(flat)
        probabilities = ops.softmax(logits, axis=-1)
        top_p, top_i = ops.top_k(probabilities, k=top_k)
        if normalise:
            top_p = top_p / ops.sum(top_p, axis=-1, keepdims=True)
        out = dispatched(flat, top_i, ops.cast(top_p, flat.dtype))
        out = ops.reshape(out, (batch, sequence, width))
        if training:
            aux = load_balancing(
                router_logits=logits,
                num_experts=experts,
                top_k=top_k,
                attention_mask=attention_mask,
            )
            block.add_loss(coefficient * aux)
        return out, logits

    return call


def dropped_tokens(
    layers: Sequence[DispatchedExperts], model: keras.Model, x: Any
) -> tuple[int, int]:
    """(dropped, routed) (token, expert) choices over every dispatched block, in one forward
    pass on `x` (one global batch), called eagerly so each block reports its count."""
    for layer in layers:
        layer.tally = []
    try:
        model(x, training=False)
        counts = [c for layer in layers for c in layer.tally or []]
    finally:
        for layer in layers:
            layer.tally = None
    return sum(d for d, _ in counts), sum(r for _, r in counts)


def expert_flops(layer: DispatchedExperts, tokens: int, top_k: int) -> int:
    """Forward FLOPs of one call's expert matmuls on `tokens`: 2 per multiply-add, every slot of
    every expert's buffer from every device."""
    devices = layer.mesh.devices.size
    slots = layer.capacity(tokens // devices, top_k)
    per_expert = sum(math.prod(int(d) for d in k.shape[1:]) for k in layer.kernels)
    return 2 * slots * devices * layer.experts * per_expert
