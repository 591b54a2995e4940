"""Expert parallelism's layout, read off a model's shapes: each mixture-of-experts block's stacked
expert kernels split over the expert axis, and what its collectives move and its experts compute.

A bank is one layer's weights whose leading dimension is E, among them a kernel into the experts
(E, width, F) and one out of them (E, F, width); its router is the nearest 2-D (width, E) kernel
up the layers (keras-hub's six MoE families: beside the bank, in a router layer of its own, or
beside the bank's parent). Names are not read, so a user's own bank laid out alike is found too.
Each per-expert weight is placed `("model", None, ...)`: the expert axis, which Keras's mesh
names "model", holds E ÷ devices experts on each device, biases and scales with their kernels.

With the dense bank every device computes its experts for all its tokens, and the block's output
is summed over the expert axis: one all-reduce forward, one for the input's gradient backward,
as tensor parallelism's row split. Dispatched, each token goes to its top-k experts' devices by
an all-to-all and comes back by another, forward and backward alike. What the experts keep for
the backward follows the work: the dense bank every expert's outputs for every token, dispatched
experts only their capacity's slots. Pure: `LayerInfo`s in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .layout import (
    MODEL,
    Axes,
    Collective,
    LayerInfo,
    Layout,
    Placement,
    VariableInfo,
    derive_layout,
)
from .traffic import ACTIVATION_BYTES

EXPERT_AXIS = MODEL  # the mesh's second axis, as keras.distribution names it


@dataclass(frozen=True)
class ExpertBank:
    """One mixture-of-experts block's router and stacked expert kernels, as its shapes show."""

    layer: str  # the layer holding the block (a Transformer block of keras-hub's)
    router: str  # the router kernel's path, (width, experts)
    experts: int
    width: int
    kernels: tuple[VariableInfo, ...]  # the stacked expert kernels, (experts, ..., ...)
    tokens_per_sample: int  # tokens each sample routes: the block's output ÷ width
    # the bank's other per-expert weights, (experts, ...): gpt-oss's biases, Gemma 4's scales
    extras: tuple[VariableInfo, ...] = ()

    @property
    def parameters_per_expert(self) -> int:
        """One expert's weights: the matmuls each routed token goes through, multiply-adds."""
        return sum(math.prod(k.shape[1:]) for k in self.kernels)

    @property
    def outputs_per_expert(self) -> int:
        """What one token's pass through one expert writes, in values: each stacked matmul its
        last dimension (Mixtral's gate and up FFN each, its down the width)."""
        return sum(k.shape[-1] for k in self.kernels)

    @property
    def variables(self) -> tuple[VariableInfo, ...]:
        """Every per-expert weight of the bank, the kernels first: what the expert axis splits."""
        return self.kernels + self.extras

    @property
    def bytes(self) -> int:
        return sum(math.prod(k.shape) * k.itemsize for k in self.variables)


def find_banks(layers: Sequence[LayerInfo]) -> list[ExpertBank]:
    """Every block with a router and stacked experts, in call order.

    A bank is one layer's weights whose leading dimension is E, among them a kernel into the
    experts (E, width, F) and one out of them (E, F, width); its router, a (width, E) kernel,
    is the nearest one up the layers from it: beside it (Mixtral, the Qwen-MoE families), a
    layer further down beside it (gpt-oss's router layer) or beside its parent (Gemma 4's
    decoder block). An attention layer's per-head kernels are one to a layer, so never a bank.

    >>> router = VariableInfo("b/moe/router/kernel", (8, 4), "moe/router/kernel")
    >>> up = VariableInfo("b/moe/experts/up", (4, 8, 16), "moe/experts/up")
    >>> down = VariableInfo("b/moe/experts/down", (4, 16, 8), "moe/experts/down")
    >>> [b.experts for b in find_banks([LayerInfo("b", "other", (router, up, down), None, 40, 40)])]
    [4]
    """
    banks = []
    for layer in layers:
        owners = _per_expert_owners(layer.variables)
        nearest: dict[str, tuple[int, VariableInfo]] = {}  # bank's holder: (depth, router)
        for router in layer.variables:
            if len(router.shape) != 2 or not router.trainable or router.shape[1] < 2:
                continue
            found = _nearest_bank(router.role, owners, *router.shape)
            if found is not None and found[1] > nearest.get(found[0], (-1, None))[0]:
                nearest[found[0]] = (found[1], router)
        for owner, (_, router) in sorted(nearest.items(), key=lambda o: _order(layer, o[1][1])):
            width, experts = router.shape
            held = owners[owner]
            kernels = tuple(v for v in held if len(v.shape) == 3 and v.shape[0] == experts)
            extras = tuple(v for v in held if v not in kernels and v.shape[0] == experts)
            tokens = (layer.out_elements or 0) // width
            banks.append(
                ExpertBank(layer.name, router.path, experts, width, kernels, tokens, extras)
            )
    return banks


def _order(layer: LayerInfo, variable: VariableInfo) -> int:
    return layer.variables.index(variable)


def _per_expert_owners(variables: Sequence[VariableInfo]) -> dict[str, list[VariableInfo]]:
    """Each layer's own weights (by the path of the layer holding them: "moe/experts/")."""
    owners: dict[str, list[VariableInfo]] = {}
    for v in variables:
        owners.setdefault(_holder(v.role), []).append(v)
    return owners


def _is_bank(held: Sequence[VariableInfo], width: int, experts: int) -> bool:
    stacked = [v.shape for v in held if len(v.shape) == 3 and v.shape[0] == experts]
    into = any(s[1] == width for s in stacked)
    out = any(s[2] == width for s in stacked)
    return into and out


def _nearest_bank(
    role: str, owners: dict[str, list[VariableInfo]], width: int, experts: int
) -> tuple[str, int] | None:
    """The layer holding the bank a router at `role` routes for, and how deep the layer that
    holds both is: the first layer up from the router's own whose weights hold exactly one bank
    of its width and experts. A router nearer its bank wins over another that finds it too."""
    prefix = _holder(role)
    while True:
        found = [
            owner
            for owner, held in owners.items()
            if owner.startswith(prefix) and _is_bank(held, width, experts)
        ]
        if len(found) == 1:
            return found[0], prefix.count("/")
        if found or not prefix:
            return None
        prefix = _holder(prefix.rstrip("/"))


def _holder(role: str) -> str:
    """The layer holding a weight: "moe/router/kernel" → "moe/router/" ("" at the top)."""
    parts = role.split("/")
    return "/".join(parts[:-1]) + "/" if len(parts) > 1 else ""


def expert_layout(
    layers: Sequence[LayerInfo],
    banks: Sequence[ExpertBank],
    expert: int,
    user: Sequence[tuple[str, Axes]] = (),
    source: str = "user",
    dispatched: bool = False,
) -> Layout:
    """Every expert kernel of `banks` on the expert axis of `expert` devices, every other weight
    whole; `user` (pattern, axes) pairs win, as in `derive_layout`. The dense bank's output is
    summed over the expert axis (forward) and so is its input's gradient (backward); dispatched
    experts move tokens by all-to-all instead (`all_to_all_bytes`), no sum.

    >>> router = VariableInfo("b/moe/router/kernel", (8, 4), "moe/router/kernel")
    >>> up = VariableInfo("b/moe/experts/up", (4, 8, 16), "moe/experts/up")
    >>> down = VariableInfo("b/moe/experts/down", (4, 16, 8), "moe/experts/down")
    >>> block = LayerInfo("b", "other", (router, up, down), None, 40, 40)
    >>> expert_layout([block], find_banks([block]), 2).axes_by_path()["b/moe/experts/up"]
    ('model', None, None)
    """
    placed = {k.path for bank in banks for k in bank.variables}
    layout = derive_layout(layers, 1, user, source)  # the user's or the model's own placements
    layout.model = expert
    layout.placements = [_expert_placement(p, placed, source) for p in layout.placements]
    if expert > 1 and not dispatched:
        for bank in banks:
            per_sample = bank.tokens_per_sample * bank.width
            layout.collectives.append(
                Collective(bank.layer, "forward", per_sample, "experts' weighted outputs summed")
            )
            layout.collectives.append(
                Collective(bank.layer, "backward", per_sample, "experts' input gradients summed")
            )
    return layout


def with_experts_split(layout: Layout, layers: Sequence[LayerInfo]) -> Layout:
    """`layout` (tensor's, over `layout.model` devices) with each dense expert bank it left whole
    split along its experts over the same model axis, as `expert` splits it, where that axis
    divides the bank's experts; its output is then summed over the axis, forward and backward.
    A placement the user or the model gave is kept. So a pipeline stage's (data, model)
    sub-mesh, and `tensor`, hold a mixture of experts' experts divided, not copied.

    >>> router = VariableInfo("b/moe/router/kernel", (8, 4), "moe/router/kernel")
    >>> up = VariableInfo("b/moe/experts/up", (4, 8, 16), "moe/experts/up")
    >>> down = VariableInfo("b/moe/experts/down", (4, 16, 8), "moe/experts/down")
    >>> block = LayerInfo("b", "other", (router, up, down), None, 40, 40)
    >>> split = with_experts_split(derive_layout([block], 2), [block])
    >>> split.axes_by_path()["b/moe/experts/up"], len(split.collectives)
    (('model', None, None), 2)
    """
    if layout.model < 2:
        return layout
    banks = [b for b in find_banks(layers) if b.experts % layout.model == 0]
    kernels = {k.path for bank in banks for k in bank.variables}
    whole = {p.path for p in layout.placements if p.path in kernels and p.role == "replicated"}
    if not whole:
        return layout
    placements = [
        _expert_placement(p, whole, "") if p.path in whole else p for p in layout.placements
    ]
    collectives = list(layout.collectives)
    for bank in (b for b in banks if any(k.path in whole for k in b.variables)):
        per_sample = bank.tokens_per_sample * bank.width
        collectives.append(
            Collective(bank.layer, "forward", per_sample, "experts' weighted outputs summed")
        )
        collectives.append(
            Collective(bank.layer, "backward", per_sample, "experts' input gradients summed")
        )
    return Layout(layout.model, placements, collectives)


def _expert_placement(p: Placement, placed: set[str], source: str) -> Placement:
    """An expert kernel on the expert axis along its leading dimension, a placement given by
    the user or the model kept, any other weight whole."""
    if p.role in ("user", source):
        return p
    if p.path in placed:
        return replace(p, axes=(EXPERT_AXIS,) + (None,) * (len(p.shape) - 1), role="expert")
    return replace(p, axes=(None,) * len(p.shape), role="replicated")


def capacity_per_expert(tokens: int, top_k: int, experts: int, capacity_factor: float) -> int:
    """Slots each expert keeps for the tokens one device sends it: capacity_factor × tokens ×
    top-k ÷ experts, rounded up, and never more than the tokens themselves.

    >>> capacity_per_expert(64, 2, 4, 1.25)
    40
    """
    return max(1, min(tokens, math.ceil(capacity_factor * tokens * top_k / experts)))


@dataclass(frozen=True)
class ExpertWork:
    """Per training step, over the whole mesh: the expert matmuls' FLOPs, dense and dispatched,
    and the bytes dispatched experts' all-to-alls move."""

    dense_flops: int  # every expert on every token, forward and backward
    dispatched_flops: int  # every expert on its capacity's slots from every device
    all_to_all_bytes: int  # per device: dispatch and return, forward and backward

    @property
    def ratio(self) -> float:
        return self.dispatched_flops / self.dense_flops if self.dense_flops else float("nan")


def expert_work(
    banks: Sequence[ExpertBank],
    global_batch: int,
    mesh: tuple[int, int],
    top_k: Sequence[int],
    capacity_factor: float,
) -> ExpertWork:
    """Textbook counts: a multiply-add is 2 FLOPs and the backward twice the forward, so a
    training step is 6 × tokens × one expert's weights per token an expert computes. The dense
    bank computes every expert on every token; dispatched, each expert computes its capacity's
    slots from each of the mesh's devices (padding included), about top-k ÷ experts of that.
    Each slot's width crosses the expert axis twice forward (there and back) and twice backward.

    >>> router = VariableInfo("b/moe/router/kernel", (8, 4), "moe/router/kernel")
    >>> up = VariableInfo("b/moe/experts/up", (4, 8, 16), "moe/experts/up")
    >>> down = VariableInfo("b/moe/experts/down", (4, 16, 8), "moe/experts/down")
    >>> bank = find_banks([LayerInfo("b", "other", (router, up, down), None, 80, 80)])[0]
    >>> work = expert_work([bank], 8, (1, 2), [2], 1.0)
    >>> work.ratio
    0.5
    """
    data, expert = mesh
    dense = dispatched = moved = 0
    devices = data * expert
    for bank, k in zip(banks, top_k, strict=True):
        tokens = global_batch * bank.tokens_per_sample
        per_device = tokens // devices
        slots = capacity_per_expert(per_device, k, bank.experts, capacity_factor)
        dense += 6 * tokens * bank.experts * bank.parameters_per_expert
        dispatched += 6 * slots * devices * bank.experts * bank.parameters_per_expert
        buffer = slots * bank.experts * bank.width * ACTIVATION_BYTES
        moved += 4 * (expert - 1) * buffer // expert
    return ExpertWork(dense, dispatched, moved)


def dense_activation_bytes(
    banks: Sequence[ExpertBank], global_batch: int, mesh: tuple[int, int]
) -> int:
    """Per device, what keras-hub's dense banks keep for the backward: every local expert's
    matmul outputs for every token of the device's share of the batch, float32; ∝ experts ×
    tokens. The mesh is (data, expert): the batch split over the first axis, each bank's
    experts over the second where it divides them (`expert_layout`, `with_experts_split`).

    >>> router = VariableInfo("b/moe/router/kernel", (8, 4), "moe/router/kernel")
    >>> up = VariableInfo("b/moe/experts/up", (4, 8, 16), "moe/experts/up")
    >>> down = VariableInfo("b/moe/experts/down", (4, 16, 8), "moe/experts/down")
    >>> banks = find_banks([LayerInfo("b", "other", (router, up, down), None, 80, 80)])
    >>> dense_activation_bytes(banks, 8, (1, 2))  # 80 tokens × 2 experts × (16 + 8) × 4 bytes
    15360
    """
    data, expert = mesh
    values = 0
    for bank in banks:
        tokens = global_batch * bank.tokens_per_sample // data
        local = bank.experts // expert if bank.experts % expert == 0 else bank.experts
        values += tokens * local * bank.outputs_per_expert
    return values * ACTIVATION_BYTES


def dispatched_activation_bytes(
    banks: Sequence[ExpertBank],
    global_batch: int,
    mesh: tuple[int, int],
    top_k: Sequence[int],
    capacity_factor: float,
) -> int:
    """Per device, what dispatched experts keep for the backward: its local experts' matmul
    outputs for the slots they take from every device of the expert axis, float32. Each of the
    bank's experts keeps its capacity's slots once per device on the axis, so a device holds
    experts × capacity of its own tokens: ∝ top-k × tokens × capacity_factor.

    >>> router = VariableInfo("b/moe/router/kernel", (8, 4), "moe/router/kernel")
    >>> up = VariableInfo("b/moe/experts/up", (4, 8, 16), "moe/experts/up")
    >>> down = VariableInfo("b/moe/experts/down", (4, 16, 8), "moe/experts/down")
    >>> banks = find_banks([LayerInfo("b", "other", (router, up, down), None, 80, 80)])
    >>> dispatched_activation_bytes(banks, 8, (1, 2), [2], 1.0)  # 20 slots × 4 experts × 24 × 4
    7680
    """
    data, expert = mesh
    devices = data * expert
    values = 0
    for bank, k in zip(banks, top_k, strict=True):
        tokens = global_batch * bank.tokens_per_sample // devices
        slots = capacity_per_expert(tokens, k, bank.experts, capacity_factor)
        values += slots * bank.experts * bank.outputs_per_expert
    return values * ACTIVATION_BYTES
