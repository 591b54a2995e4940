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

Only the expert bank's work is replaced; the block keeps everything else as its family writes it
(the router, its softmax and normalisation, shared experts and their gates, the weighting, the
load-balancing loss and its padding mask). `swap_in` swaps two calls of each block: its router's,
to read the experts each token picks (the top-k of its logits, or of the routing weights a bank
that combines them itself is handed), and its bank's, which then computes each expert through
the bank's own call on a one-expert copy of it (biases, clamped or gated activations and
per-expert scales included) and returns what the bank returns. `check_swap` holds each swapped
block against its own call on one real batch before the first step, and refuses a difference.
The block's weights, their paths and their layout stay as they are: the same weights train,
only the work differs.

>>> blocks = moe_blocks(model, banks)
>>> layers = swap_in(blocks, mesh, capacity_factor=1.25)
>>> check_swap(blocks, model, x)                # refuses a swap that changes the block
>>> dropped_tokens(layers, model, x)            # (dropped, routed) on one batch
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import keras
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P
from keras import ops

from ...errors import GpkError
from ...sharding.experts import ExpertBank, capacity_per_expert
from ...sharding.traffic import DATA
from ..expert_banks import layer_top_k
from .keras_internals import sublayers

EXPERT = "model"  # the mesh's expert axis, as keras.distribution names it
TOLERANCE = 1e-5  # the swap's largest difference from the block's own call, relative


class DroppedTokens(NamedTuple):
    """(token, expert) choices on one batch: those beyond their expert's capacity, and all."""

    dropped: int
    routed: int


class DispatchedExperts:
    """The routed tokens only, through a stacked expert bank's own call, over a (data, expert)
    mesh.

    Args:
        bank: the built keras-hub expert bank (a layer whose weights all lead with the experts);
            its weights stay its own: this adds none.
        mesh: the run's `jax.sharding.Mesh`, axes ("batch", "model"), the second the experts'.
        capacity_factor: each expert keeps capacity_factor × tokens × top-k ÷ experts slots
            for the tokens of each device.

    Call arguments:
        tokens: (tokens, width).
        chosen: (tokens, top_k) int, the experts each token's router picked.

    Returns:
        (tokens, top_k, width): each token's chosen experts' outputs, unweighted; zero where a
        token was dropped.
    """

    def __init__(self, bank: keras.layers.Layer, mesh: Mesh, capacity_factor: float) -> None:
        self.bank = bank
        self.mesh = mesh
        self.capacity_factor = capacity_factor
        self.variables = list(bank.weights)
        self.experts = _experts_of(bank)
        # the bank's call takes the routing weights and sums its experts itself (Gemma 4's)
        self.combines = _combines(bank)
        self.expert = _one_expert(bank, self.experts, self.combines)
        self.tally: list[DroppedTokens] | None = None  # counts of eager calls

    def capacity(self, tokens: int, top_k: int) -> int:
        """Slots per expert for the `tokens` of one device."""
        return capacity_per_expert(tokens, top_k, self.experts, self.capacity_factor)

    def __call__(self, tokens, chosen):
        devices = self.mesh.devices.size
        total, top_k = int(tokens.shape[0]), int(chosen.shape[1])
        if total % devices:
            raise GpkError(
                f"dispatched experts split the {total} tokens of a batch over {devices} "
                f"devices, which does not divide them; use a batch size whose tokens "
                f"{devices} divides, or experts='dense'"
            )
        slots = self.capacity(total // devices, top_k)
        local = _local_dispatch(slots, self.experts, self.mesh.shape[EXPERT], self.expert)
        spread = P((DATA, EXPERT))
        weight_spec = tuple(P(EXPERT) for _ in self.variables)
        output, dropped = jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(spread, spread, weight_spec),
            out_specs=(spread, P()),
        )(tokens, ops.cast(chosen, "int32"), tuple(v.value for v in self.variables))
        if self.tally is not None and not isinstance(dropped, jax.core.Tracer):
            self.tally.append(DroppedTokens(int(dropped), total * top_k))
        return output

    @contextmanager
    def roomy(self) -> Iterator[None]:
        """Room for every token in every expert, while the block is checked."""
        kept = self.capacity_factor
        self.capacity_factor = float(self.experts)
        try:
            yield
        finally:
            self.capacity_factor = kept


def _local_dispatch(slots: int, experts: int, expert_devices: int, expert: Callable):
    """One device's part: its tokens into its experts' buffers, the exchange, its local experts,
    the exchange back, and each of its tokens' choices' outputs."""
    local_experts = experts // expert_devices

    def local(tokens, chosen, weights):
        count, width = tokens.shape
        top_k = chosen.shape[1]
        # (choice, token) order: every token's first choice gets a slot before any second one.
        picked = chosen.T.reshape(-1)
        source = jnp.tile(jnp.arange(count), top_k)
        one_hot = jax.nn.one_hot(picked, experts, dtype=jnp.int32)
        position = jnp.sum((jnp.cumsum(one_hot, axis=0) - 1) * one_hot, axis=1)
        kept = position < slots
        slot = jnp.where(kept, picked * slots + position, experts * slots)  # the last: dropped
        buffer = jnp.zeros((experts * slots + 1, width), tokens.dtype).at[slot].add(tokens[source])
        buffer = buffer[:-1].reshape(expert_devices, local_experts, slots, width)
        received = jax.lax.all_to_all(buffer, EXPERT, 0, 0, tiled=True)
        # (local experts, every device's slots, width) through the local experts
        mine = received.transpose(1, 0, 2, 3).reshape(local_experts, -1, width)
        computed = jax.vmap(expert)(weights, mine).astype(tokens.dtype)
        computed = computed.reshape(local_experts, expert_devices, slots, width)
        returned = jax.lax.all_to_all(computed.transpose(1, 0, 2, 3), EXPERT, 0, 0, tiled=True)
        outputs = jnp.concatenate(
            [returned.reshape(experts * slots, width), jnp.zeros((1, width), tokens.dtype)]
        )
        per_choice = outputs[slot].reshape(top_k, count, width).transpose(1, 0, 2)
        dropped = jax.lax.psum(jnp.sum(~kept), (DATA, EXPERT))
        return per_choice, dropped

    return local


def _experts_of(bank: Any) -> int:
    """The bank's experts: the leading dimension every one of its weights shares."""
    leading = {int(v.shape[0]) if len(v.shape) else 0 for v in bank.weights}
    if len(leading) != 1 or leading == {0} or not bank.weights:
        shapes = [tuple(int(d) for d in v.shape) for v in bank.weights]
        raise GpkError(
            f"experts='dispatched' splits an expert bank's weights along their leading "
            f"dimension, but {type(bank).__name__} {bank.name!r} holds weights of shapes "
            f"{shapes}; use experts='dense'"
        )
    return leading.pop()


def _combines(bank: Any) -> bool:
    """Whether the bank's call takes the routing weights and sums its experts itself (Gemma 4's)
    rather than returning every expert's output for the block to weigh (the others')."""
    parameters = inspect.signature(type(bank).call).parameters.values()
    required = [p for p in parameters if p.kind == p.POSITIONAL_OR_KEYWORD and p.default is p.empty]
    return len(required) == 3  # self, the tokens, the routing weights


def _one_expert(bank: Any, experts: int, combines: bool) -> Callable:
    """One expert's feed-forward, (its weights without the leading axis, (n, width) tokens) →
    (n, width): the bank's own call on a one-expert copy of it that holds the given weights.

    The copy shares the bank's attributes but for its weights and `num_experts`; floating
    weights are cast to the bank's compute dtype, as Keras's autocast reads them in its call.
    """
    held = {id(v): name for name, v in vars(bank).items() if isinstance(v, keras.Variable)}
    names = [held.get(id(v)) for v in bank.weights]
    if None in names or getattr(bank, "num_experts", None) != experts:
        raise GpkError(
            f"experts='dispatched' runs each expert through the bank's own call, which needs "
            f"{type(bank).__name__} {bank.name!r} to hold its weights as attributes and name "
            "its num_experts; use experts='dense'"
        )
    copy = object.__new__(type(bank))
    vars(copy).update(vars(bank), num_experts=1)
    compute = bank.compute_dtype

    def expert(weights, tokens):
        for name, weight in zip(names, weights, strict=True):
            floating = jnp.issubdtype(weight.dtype, jnp.floating)
            vars(copy)[name] = (weight.astype(compute) if floating else weight)[None]
        if combines:
            return type(bank).call(copy, tokens, jnp.ones((tokens.shape[0], 1), tokens.dtype))
        return type(bank).call(copy, tokens)[0]

    return expert


@dataclass
class MoeBlock:
    """A built MoE block of the model: the nearest layer holding both its router and its expert
    bank, and the calls `swap_in` swaps."""

    layer: Any  # the block checked against its own call: keras-hub's MoE block, or decoder
    router: Any  # the Dense layer whose kernel is the bank's router
    bank: Any  # the layer whose weights are the experts'
    top_k: int | None  # experts per token, as the block or its router names it
    dispatched: DispatchedExperts | None = None
    picked: list[Any] = field(default_factory=list)  # the router's last logits, for the bank

    def install(self) -> None:
        """Route the bank's tokens through `dispatched`; the router's logits are read where the
        bank is not handed the routing itself."""
        assert self.dispatched is not None
        if not self.dispatched.combines:
            self.router.__dict__["call"] = self._routing_call()
        self.bank.__dict__["call"] = self._bank_call()

    def remove(self) -> None:
        """Put the block's own calls back."""
        for layer in (self.router, self.bank):
            layer.__dict__.pop("call", None)
        self.picked.clear()

    @property
    def installed(self) -> bool:
        return "call" in self.bank.__dict__

    def _routing_call(self):
        own = type(self.router).call.__get__(self.router)

        def call(*args, **kwargs):
            logits = own(*args, **kwargs)
            self.picked[:] = [logits]
            return logits

        return call

    def _bank_call(self):
        dispatched, top_k = self.dispatched, self.top_k
        assert dispatched is not None and top_k is not None
        experts = dispatched.experts

        def call(hidden_states, *routing):
            if dispatched.combines:  # the bank weighs and sums its experts: the routing handed in
                weights, chosen = ops.top_k(routing[0], k=top_k)
                out = dispatched(hidden_states, chosen)
                return ops.sum(out * ops.cast(weights, out.dtype)[..., None], axis=1)
            if not self.picked:
                raise GpkError(
                    f"experts='dispatched' reads the experts each token picks off the router "
                    f"{self.router.name!r}, but the bank {self.bank.name!r} was called before "
                    "it; use experts='dense'"
                )
            # Softmax keeps the logits' order, so their top-k are the experts the block picks.
            _, chosen = ops.top_k(self.picked.pop(), k=top_k)
            out = dispatched(hidden_states, chosen)  # (tokens, top_k, width)
            tokens = out.shape[0]
            every = jnp.zeros((experts, tokens, out.shape[2]), out.dtype)
            return every.at[chosen.T, jnp.arange(tokens)[None, :]].set(out.transpose(1, 0, 2))

        return call


def moe_blocks(model: keras.Model, banks: Sequence[ExpertBank]) -> list[MoeBlock]:
    """The built blocks holding `banks`, in the banks' order: each the nearest layer holding
    both a Dense layer whose kernel is a bank's router and the layer whose weights are its
    experts."""
    parents: dict[int, Any] = {}
    everything = list(_layers(model, None, parents))
    routers = {
        layer.kernel.path: layer
        for layer in everything
        if isinstance(layer, keras.layers.Dense) and getattr(layer, "kernel", None) is not None
    }
    holders = {frozenset(v.path for v in layer.weights): layer for layer in reversed(everything)}
    found: dict[str, MoeBlock] = {}
    for bank in banks:
        router = routers.get(bank.router)
        owner = holders.get(frozenset(v.path for v in bank.variables))
        if router is None or owner is None:
            continue
        block = _common_ancestor(router, owner, parents)
        found[bank.router] = MoeBlock(block, router, owner, _top_k(block, router, parents))
    missing = [bank.layer for bank in banks if bank.router not in found]
    if missing:
        raise GpkError(
            f"strategy='expert' found expert kernels in {missing[0]!r} but no layer holding "
            "both its router (a Dense layer) and its expert bank; build the block as keras-hub "
            "does (router and bank layers in one block), or use strategy='tensor'"
        )
    return [found[bank.router] for bank in banks]


def swap_in(blocks: Sequence[MoeBlock], mesh: Mesh, capacity_factor: float) -> list[Any]:
    """Each of `blocks` made to send its bank's tokens through a `DispatchedExperts`; those, in
    the blocks' order. Refuses, in one sentence, a block that cannot be checked or swapped."""
    for block in blocks:
        _check_routing(block)
    for block in blocks:
        block.dispatched = DispatchedExperts(block.bank, mesh, capacity_factor)
        block.install()
    return [block.dispatched for block in blocks]


def _check_routing(block: MoeBlock) -> None:
    if block.top_k is None:
        raise GpkError(
            f"experts='dispatched' needs the experts each token is sent to, but "
            f"{type(block.layer).__name__} {block.layer.name!r} names no top_k; use "
            "experts='dense'"
        )
    jitter = getattr(block.layer, "router_jitter_noise", 0)
    if jitter:
        raise GpkError(
            f"experts='dispatched' checks each swapped block against its own call on one batch, "
            f"which router_jitter_noise={jitter} on {type(block.layer).__name__} "
            f"{block.layer.name!r} makes random; build it with router_jitter_noise=0, or use "
            "experts='dense'"
        )


def check_swap(blocks: Sequence[MoeBlock], model: keras.Model, x: Any) -> None:
    """Each swapped block's output and losses on its inputs from one forward pass of `x` (one
    global batch), against the block's own call, with room for every token; a difference above
    `TOLERANCE` refuses the run in one sentence naming the block."""
    inputs = _block_inputs(blocks, model, x)
    for block, (args, kwargs) in zip(blocks, inputs, strict=True):
        block.remove()
        own = _called(block.layer, args, kwargs)
        block.install()
        assert block.dispatched is not None
        with block.dispatched.roomy():
            swapped = _called(block.layer, args, kwargs)
        difference = _relative_difference(own, swapped)
        if not difference <= TOLERANCE:
            raise GpkError(
                f"experts='dispatched' would train another model than the one built: "
                f"{type(block.layer).__name__} {block.layer.name!r} with its experts dispatched "
                f"differs from its own call by {difference:.2g} (relative, above {TOLERANCE:g}) "
                "on one batch with room for every token; use experts='dense'"
            )


def _block_inputs(blocks: Sequence[MoeBlock], model: keras.Model, x: Any) -> list[Any]:
    """Each block's (args, kwargs) in one training-mode forward pass of the model as built."""
    recorded: dict[int, Any] = {}
    installed = [b for b in blocks if b.installed]
    for block in installed:
        block.remove()
    for block in blocks:
        block.layer.__dict__["call"] = _recording(block.layer, recorded)
    try:
        model(x, training=True)
    finally:
        for block in blocks:
            block.layer.__dict__.pop("call", None)
        for block in installed:
            block.install()
    return [recorded[id(block.layer)] for block in blocks]


def _recording(layer: Any, recorded: dict[int, Any]):
    own = type(layer).call.__get__(layer)

    def call(*args, **kwargs):
        recorded.setdefault(id(layer), (args, kwargs))
        return own(*args, **kwargs)

    return call


def _called(layer: Any, args: Any, kwargs: Any) -> list[Any]:
    """The layer's outputs and the losses it added, called alone, eagerly."""
    outputs = layer(*args, **kwargs)
    return [*jax.tree_util.tree_leaves(outputs), *layer.losses]


def _relative_difference(own: Sequence[Any], swapped: Sequence[Any]) -> float:
    if len(own) != len(swapped):
        return float("inf")
    largest = 0.0
    for a, b in zip(own, swapped, strict=True):
        a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
        if a.shape != b.shape:
            return float("inf")
        scale = max(1.0, float(jnp.max(jnp.abs(a))))
        largest = max(largest, float(jnp.max(jnp.abs(a - b))) / scale)
    return largest


def _layers(layer: Any, parent: Any, parents: dict[int, Any]):
    parents[id(layer)] = parent
    yield layer
    for child in sublayers_of(layer):
        yield from _layers(child, layer, parents)


def _ancestors(layer: Any, parents: dict[int, Any]) -> list[Any]:
    chain = []
    while layer is not None:
        chain.append(layer)
        layer = parents.get(id(layer))
    return chain


def _common_ancestor(a: Any, b: Any, parents: dict[int, Any]) -> Any:
    above_b = {id(layer) for layer in _ancestors(b, parents)}
    return next(layer for layer in _ancestors(a, parents) if id(layer) in above_b)


def _top_k(block: Any, router: Any, parents: dict[int, Any]) -> int | None:
    """Experts per token, as a layer between the router and the block (both included) names
    them (`expert_banks.layer_top_k`)."""
    for layer in _ancestors(router, parents):
        value = layer_top_k(layer)
        if value is not None or layer is block:
            return value
    return None


def sublayers_of(layer: Any) -> list[Any]:
    try:
        return sublayers(layer)
    except GpkError:
        return []


def dropped_tokens(
    layers: Sequence[DispatchedExperts], model: keras.Model, x: Any
) -> DroppedTokens:
    """Dropped and routed (token, expert) choices over every dispatched block, in one forward
    pass on `x` (one global batch), called eagerly so each block reports its count."""
    for layer in layers:
        layer.tally = []
    try:
        model(x, training=False)
        counts = [c for layer in layers for c in layer.tally or []]
    finally:
        for layer in layers:
            layer.tally = None
    return DroppedTokens(sum(c.dropped for c in counts), sum(c.routed for c in counts))
