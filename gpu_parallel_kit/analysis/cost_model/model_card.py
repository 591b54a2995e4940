"""A model's card: what a parallel plan needs of it, counted once, and the card made from a
counted step.

A Transformer stack is carded by its repeated blocks (the count's parameters and FLOPs per
block, its width, heads and sequence); any other model by its own layers, row by row
(`layer_rows.py`: each layer's counted work, kept activations and what the sharding rules
split of it), its blocks then being its layers. One card type, one plan type and one ranking
serve both (`parallel_plan.py`, `parallel_plan_step_time.py`, `parallel_plan_memory.py`).

The card holds the count's parameters and FLOPs per sample, the structure the model says (or the
user gives), the activations one block keeps (the mean of the count's blocks) and the kernels
one block launches (the compiled step's). What a block keeps on one of `tensor` devices follows
Korthikanti et al. (2022); docs/planning.md gives the formulas and sources.

A mixture of experts' card holds the FLOPs of its active parameters: keras-hub's expert banks
are dense (every expert computes every token, the router's top-k only weighting the outputs), so
the count's FLOPs and kept activations of the banks are scaled by top-k ÷ experts, as a training
run that dispatches each token to its top-k experts computes and keeps them.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import GpkError, whole_number
from .counted_work import WorkCount, from_counts
from .layer_rows import LayerRow, LayerSplit, layer_infos, layer_rows, layer_split
from .roofline import ACTIVATION_WIDTH, fusion
from .training_precision import SHARDED_BY_DATA, StateBytes, state_bytes, training_precision

if TYPE_CHECKING:
    from .parallel_plan import Plan

# Kernels one Transformer block launches per micro-batch when the count does not say: Megatron-LM's
# fused forward is 12 (2 layer norms, the QKV, projection and two MLP matmuls, the two batched
# attention matmuls, the fused scale-mask-softmax, two bias-dropout-adds, the bias-GeLU), and the
# backward launches about twice as many (Shoeybi et al. 2019; Korthikanti et al. 2022).
KERNELS_PER_BLOCK = 36.0
STRUCTURE = ("blocks", "hidden", "heads")
# A softmax's operations per score (max, subtract, exponential, sum, divide), as FLOP counters
# such as DeepSpeed's count it.
SOFTMAX_FLOPS = 5.0
# How a plan runs attention: fused (its scores never kept, Dao et al. 2022), or as written.
FLASH, AS_WRITTEN = "flash", "as-written"
ATTENTIONS = (FLASH, AS_WRITTEN)
SELECTIVE = "selective"  # checkpointing that recomputes the attention core only
# Passes attention as written makes over its s² tensors, each a write or a read at the
# activations' width, with one byte a score for the dropout mask written forward and read
# backward; the scale, mask and softmax one kernel, as Megatron-LM fuses them and XLA does.
# Forward: QKᵀ writes the scores, the softmax reads them and writes its output, the dropout
# reads that and writes its own, scores·V reads it (6). Backward: dO·Vᵀ writes its gradient,
# the dropout's backward reads it and writes, the softmax's reads that and its output and
# writes, dQ and dK read that, dV the dropped softmax (9). A fused kernel keeps them all in
# on-chip memory (Dao et al. 2022, Algorithm 0 against Algorithm 1).
FORWARD_SCORE_PASSES, BACKWARD_SCORE_PASSES = 6, 9
# Slots each expert keeps over its even share of the tokens (Fedus et al. 2021; Megatron-Core's
# `moe_expert_capacity_factor`): the busiest expert's tokens bound a dispatched step.
CAPACITY_FACTOR = 1.25
# FLOPs of one weight for one token, forward and backward: 2 in the forward's multiply-add,
# 4 in the backward's two (Kaplan et al. 2020's 6·N per token).
TRAINING_FLOPS_PER_WEIGHT = 6.0


@dataclass(frozen=True)
class ModelCard:
    """What a plan needs of a model, counted once (`worker/jax/abstract_count.py`): a
    Transformer stack's blocks, or any model's own layers (`rows`; `layer_card` makes it).

    Args:
        parameters: trainable parameters.
        layers: Transformer blocks, the units a pipeline cuts between.
        hidden: the model's width h.
        heads: attention heads a.
        sequence: tokens per sample s.
        flops_per_sample: forward and backward FLOPs of one sample, recomputation excluded.
        activation_bytes: what backpropagation keeps per block and sample, at `precision`.
        precision: the training precision ("bf16", "fp16", "mixed", "fp32"), as
            `training_precision` names it.
        optimizer: the optimizer's name (adam, sgd, ...) or its bytes of state per parameter.
        kernels_per_block: kernels one block launches per micro-batch, forward and backward (the
            counted step's, else Megatron-LM's `KERNELS_PER_BLOCK`): the launch floor.
        kv_heads: the key-value heads of grouped-query attention (None: as many as `heads`).
        vocabulary: the tokens of the embedding and the language-model head (0: not known,
            their work then counted with the blocks').
        attention_scores_bytes: the s² residuals of one block's attention per sample, as the
            count found them in the trace (None: Korthikanti et al.'s 5·a·s² at 16 bits).
        block_parameters, block_flops: one block's parameters and FLOPs per sample (a count
            by depth's slope; None: what the embedding and the head leave of the whole).
        experts: a mixture of experts' experts per block (0: a dense model).
        top_k: the experts each token is routed to.
        expert_parameters: every block's expert weights, all experts (in `parameters` too).
        capacity_factor: slots per expert over its even share of the tokens; the busiest
            expert's tokens bound the step of a plan with an expert axis.
        rows: a model carded by its own layers, one row each (`layer_rows.LayerRow`); its
            `layers` are then the rows, its `hidden` and `heads` 0.
        step_flops, step_bytes: what the counted step computes and moves whatever its batch
            (the optimizer's update), for a card of rows, whose bytes are the count's.
    """

    parameters: float
    layers: int
    hidden: int
    heads: int
    sequence: int
    flops_per_sample: float
    activation_bytes: float
    precision: str = "bf16"
    optimizer: str | float = "adam"
    kernels_per_block: float = KERNELS_PER_BLOCK
    kv_heads: int | None = None
    vocabulary: int = 0
    attention_scores_bytes: float | None = None
    block_parameters: float | None = None
    block_flops: float | None = None
    experts: int = 0
    top_k: int = 0
    expert_parameters: float = 0.0
    capacity_factor: float = CAPACITY_FACTOR
    rows: tuple[LayerRow, ...] = ()
    step_flops: float = 0.0
    step_bytes: float = 0.0

    def __post_init__(self) -> None:
        state_bytes(self.optimizer, self.precision)  # one sentence for an unknown name
        if self.experts and not 1 <= self.top_k <= self.experts:
            raise GpkError(
                f"top_k={self.top_k} is not between 1 and the {self.experts} experts; give the "
                "experts each token is routed to, e.g. 2 for Mixtral"
            )
        if self.experts and not self.capacity_factor >= 1:
            raise GpkError(
                f"capacity_factor={self.capacity_factor} is below 1; give at least 1, e.g. "
                f"{CAPACITY_FACTOR}"
            )
        if self.kv_heads is not None and (self.kv_heads < 1 or self.heads % self.kv_heads):
            raise GpkError(
                f"kv_heads={self.kv_heads} does not divide heads={self.heads}; give a divisor "
                f"of {self.heads}, e.g. 8 for grouped-query attention or 1 for multi-query"
            )
        if not self.kernels_per_block > 0:
            raise GpkError(
                f"kernels_per_block={self.kernels_per_block} must be above 0; e.g. "
                f"{KERNELS_PER_BLOCK:g}, Megatron-LM's fused block"
            )

    @property
    def has_attention(self) -> bool:
        """Whether the card knows attention heads: a Transformer stack's does, a card of rows
        not (its attention layers, if any, split as the sharding rules split them)."""
        return self.heads > 0

    def tensor_splits(self, tensor: int) -> bool:
        """Whether a tensor axis of `tensor` devices splits the model: a Transformer's where it
        divides the heads and the width, a card of rows' where the kit's own layout splits any
        weight."""
        if self.rows:
            return tensor == 1 or self.layer_split(tensor).splits
        return self.heads % tensor == 0 and self.hidden % tensor == 0

    def layer_split(self, tensor: int) -> LayerSplit:
        """A card of rows over `tensor` devices (`layer_rows.layer_split`), worked out once."""
        found = self._splits.get(tensor)
        if found is None:
            found = self._splits[tensor] = layer_split(self.rows, tensor, self.state.activation)
        return found

    @functools.cached_property
    def _splits(self) -> dict[int, LayerSplit]:
        return {}

    def layer_table(self) -> list[dict[str, float | int | str]]:
        """The card's rows as plain data, one dict per layer (no rows: a Transformer's card)."""
        shown = ("name", "kind", "flops", "bytes", "parameters", "kept_bytes")
        return [{key: getattr(row, key) for key in shown} for row in self.rows]

    @property
    def has_experts(self) -> bool:
        """Whether the model is a mixture of experts, whose plans get an expert axis."""
        return self.experts > 1

    @property
    def active_parameters(self) -> float:
        """The weights one token goes through: every parameter but the experts it is not
        routed to."""
        if not self.has_experts:
            return self.parameters
        return self.parameters - self.expert_parameters * (1 - self.top_k / self.experts)

    @property
    def block_expert_parameters(self) -> float:
        """One block's expert weights, all its experts."""
        return self.expert_parameters / self.layers

    @property
    def block_expert_flops(self) -> float:
        """What one block's routed experts compute per sample, forward and backward: 6 FLOPs a
        weight and token for the top-k of its experts."""
        if not self.has_experts:
            return 0.0
        routed = self.block_expert_parameters * self.top_k / self.experts
        return TRAINING_FLOPS_PER_WEIGHT * self.sequence * routed

    @property
    def routed_bytes(self) -> float:
        """One sample's tokens sent to their experts by one all-to-all: s·h·top-k values at the
        activations' width."""
        return self.state.activation * self.sequence * self.hidden * self.top_k

    def __hash__(self) -> int:
        # A search asks cached figures of one card for every plan: its hash, worked out once.
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))

    @functools.cached_property
    def state(self) -> StateBytes:
        """Bytes per parameter of each model state (`training_precision.StateBytes`)."""
        return state_bytes(self.optimizer, self.precision)

    @functools.cached_property  # a search asks it of every plan
    def score_bytes(self) -> float:
        """The attention scores, softmax and dropout mask per block and sample: what the count
        found of them in the trace, else 5·a·s² at 16 bits (two values and a one-byte mask per
        score)."""
        if self.attention_scores_bytes is not None:
            return self.attention_scores_bytes
        return (2.0 * self.state.activation + 1.0) * self.heads * self.sequence**2

    def score_traffic_bytes(self, checkpointing: str = "none") -> float:
        """Bytes attention as written moves through memory per block and sample for its s²
        scores, forward and backward (`FORWARD_SCORE_PASSES`, `BACKWARD_SCORE_PASSES`; the
        forward's once more where `checkpointing` recomputes it): (15·w + 2) bytes a score and
        head at width w, scaled to the bytes of them the count found kept (`score_bytes`, whose
        2·w + 1 a score it stands for). A fused kernel moves none of them."""
        width = self.state.activation
        forward = FORWARD_SCORE_PASSES * width + 1.0
        passes = forward + BACKWARD_SCORE_PASSES * width + 1.0
        if checkpointing != "none":
            passes += forward
        return self.score_bytes * passes / (2.0 * width + 1.0)

    @functools.cached_property  # a search asks it of every plan
    def key_value_heads(self) -> int:
        """The heads K and V have: `kv_heads`, else every attention head."""
        return self.kv_heads or self.heads

    def key_value_split(self, tensor: int) -> int:
        """The ways K and V split over `tensor` devices: no further than their heads, the rest
        of the group holding copies (Megatron-LM replicates them so)."""
        return min(tensor, self.key_value_heads)

    def key_value_copies(self, tensor: int) -> float:
        """What one block's K and V cost each device beyond an even split by `tensor`, as a
        share of one copy: 1/min(t, kv) − 1/t (0 while t divides the KV heads)."""
        if self.kv_heads is None or tensor <= self.kv_heads:
            return 0.0
        return 1.0 / self.kv_heads - 1.0 / tensor

    @functools.cached_property  # a search asks it of every plan
    def key_value_parameters(self) -> float:
        """One block's K and V projection weights: 2·h·kv·h/a (0 without heads)."""
        if not self.heads:
            return 0.0
        return 2.0 * self.hidden * self.key_value_heads * self.hidden / self.heads

    @functools.cached_property  # a search asks it of every plan
    def attention_core_flops(self) -> float:
        """One block's attention core per sample, forward: QKᵀ and the scores times V, 4·s²·h,
        and the softmax's few operations a score (0 for a model whose count found no scores)."""
        if self.score_bytes <= 0:
            return 0.0
        scores = self.heads * self.sequence**2
        return 4.0 * self.sequence**2 * self.hidden + SOFTMAX_FLOPS * scores

    @functools.cached_property  # a search asks it of every plan
    def flash_recompute_flops(self) -> float:
        """What a fused attention's backward computes again per block and sample: QKᵀ (2·s²·h)
        and the softmax (Dao et al. 2022), 0 for a model whose count found no scores."""
        if self.score_bytes <= 0:
            return 0.0
        return 2.0 * self.sequence**2 * self.hidden + SOFTMAX_FLOPS * self.heads * self.sequence**2

    @functools.cached_property  # a search asks it of every plan
    def log_sum_exp_bytes(self) -> float:
        """What a fused attention keeps per block and sample beside its output: one float32
        log-sum-exp per head and token."""
        return 4.0 * self.heads * self.sequence if self.score_bytes > 0 else 0.0

    @functools.cached_property  # a search asks it of every plan
    def activation_send_bytes(self) -> float:
        """One sample's activations across a cut, or a tensor collective's message: 2·s·h at
        16 bits."""
        return self.state.activation * self.sequence * self.hidden

    def kept_bytes(
        self,
        tensor: int,
        checkpointing: str = "none",
        attention: str = "as-written",
        sequence_parallel: bool = False,
    ) -> float:
        """What one block keeps per sample on one of `tensor` devices (`_kept_bytes`), worked
        out once per card for each of the few choices a search asks it of."""
        key = (tensor, checkpointing, attention, sequence_parallel)
        found = self._kept_by_choice.get(key)
        if found is None:
            found = self._kept_by_choice[key] = self._kept_bytes(*key)
        return found

    @functools.cached_property
    def _kept_by_choice(self) -> dict[tuple[int, str, str, bool], float]:
        return {}

    def _kept_bytes(
        self, tensor: int, checkpointing: str, attention: str, sequence_parallel: bool
    ) -> float:
        """What one block keeps per sample on one of `tensor` devices (Korthikanti et al. 2022).

        With full checkpointing, its input alone (2·s·h at 16 bits, split by t under sequence
        parallelism). Else the scores divide by t, and of the rest's 34·s·h, 24 divide by t and
        10 (the layer norms' and dropouts') do not, unless `sequence_parallel` splits them too.
        A fused attention ("flash") keeps no scores but a log-sum-exp, and selective
        checkpointing recomputes the scores instead of keeping them. K and V split no further
        than their heads (`key_value_split`).
        """
        if checkpointing == "full":
            return self.activation_send_bytes / (tensor if sequence_parallel else 1)
        rest = max(0.0, self.activation_bytes - self.score_bytes)
        kept = rest / tensor if sequence_parallel else rest * (10 + 24 / tensor) / 34
        if attention == FLASH:
            kept += self.log_sum_exp_bytes / tensor
        elif checkpointing != SELECTIVE:
            kept += self.score_bytes / tensor
        # K and V, two s·h·kv/a tensors, are kept on every device of a group beyond their heads.
        copies = self.key_value_copies(tensor)
        if copies:
            width = self.state.activation * self.sequence * self.hidden / self.heads
            kept += 2 * width * self.key_value_heads * copies
        return kept

    def moved_bytes(self, shard: float, kept: float, micro_batch_size: float) -> float:
        """Bytes one device moves through its memory for one micro-batch of its stage: its
        `shard` of the weights (parameters) read once in the forward and twice in the backward
        (the input's and the weights' gradients), its gradients written, and what its blocks
        keep of a sample (`kept` bytes) written in the forward and read in the backward
        (Williams et al.'s roofline traffic, as `roofline.py` counts it; docs/planning.md)."""
        weights = shard * (3 * self.state.params + self.state.grads)
        return weights + 2 * kept * micro_batch_size

    def update_bytes(self, plan: Plan) -> float:
        """Bytes the optimizer's update moves on one device once a step: the optimizer state of
        its slice read and written, that slice's gradients read and weights written (its
        experts divided by the expert axis)."""
        held = self.parameters - self.expert_parameters * (1 - 1 / plan.expert)
        shard = held / (plan.tensor * plan.stages)
        slice_ = shard / (plan.data if SHARDED_BY_DATA[plan.sharding][2] else 1)
        return slice_ * (2 * self.state.optimizer + self.state.grads + self.state.params)


def model_card(
    count: dict[str, Any],
    precision: str,
    optimizer: str | float,
    name: str,
    *,
    blocks: int | None = None,
    hidden: int | None = None,
    heads: int | None = None,
    sequence: int | None = None,
) -> ModelCard:
    """The card of a counted step (`worker/jax/plan_count.py`'s answer, one sample counted).

    `blocks`, `hidden` and `heads` the user passed each win over what the model says; `sequence`
    is the tokens per sample, given or read off the sample. A model with neither a keras-hub
    backbone nor several attention layers, and no structure given, is carded by its own layers
    (`layer_card`), from the count's layers; one the count has no layers of (a count kept from
    before it named them, or a subclassed model whose layers' inputs are not in a graph) is one
    sentence naming the keywords that would card it as a Transformer."""
    said = count.get("structure") or {}
    given = {"blocks": blocks, "hidden": hidden, "heads": heads}
    figures = {k: given[k] if given[k] is not None else said.get(k) for k in STRUCTURE}
    missing = [k for k in STRUCTURE if figures[k] is None] + (["sequence"] if not sequence else [])
    keywords = ", ".join(f"{k}=" for k in missing)
    if any(k in missing for k in STRUCTURE):
        if count.get("layers") and count.get("steps"):
            return layer_card(count, precision, optimizer)
        raise GpkError(
            f"{name} is neither a Transformer stack the search can read (a keras-hub backbone or "
            "a model with several attention layers) nor a model whose layers the count could "
            f"read one by one (a functional or Sequential model); pass {keywords}"
        )
    if missing:
        raise GpkError(
            f"{name}'s sample has no sequence axis to read its tokens per sample from; "
            "pass sequence="
        )
    layers, width, attention_heads = (whole_number(figures[k], k) for k in STRUCTURE)
    sequence = whole_number(sequence, "sequence")
    per_block = count.get("per_block") or {}
    routed = routed_experts(
        count.get("experts") or {}, layers, sequence, precision, count.get("kept_by_path")
    )
    block_flops = per_block.get("flops")
    return ModelCard(
        parameters=float(count["parameters"]),
        layers=layers,
        hidden=width,
        heads=attention_heads,
        sequence=sequence,
        flops_per_sample=float(count["flops"]) - routed.flops_saved * layers,
        activation_bytes=block_activations(count, layers) - routed.kept_saved,
        precision=precision,
        optimizer=optimizer,
        kernels_per_block=block_kernels(count, layers),
        kv_heads=said.get("kv_heads"),
        vocabulary=said.get("vocabulary") or 0,
        attention_scores_bytes=block_scores(count, layers),
        block_parameters=per_block.get("parameters"),
        block_flops=None if block_flops is None else block_flops - routed.flops_saved,
        experts=routed.experts,
        top_k=routed.top_k,
        expert_parameters=routed.parameters,
    )


def layer_card(count: dict[str, Any], precision: str, optimizer: str | float) -> ModelCard:
    """The card of a model carded by its own layers: the count's step at two batches ("steps",
    read by `counted_work.from_counts`), its layers' work ("layers"), the layers as the
    sharding rules read them ("layer_infos") and what backpropagation keeps of each at
    `precision` ("by_layer", where the count traced it; else half each layer's forward bytes)."""
    work = from_counts(count)
    record = training_precision(precision)
    width = ACTIVATION_WIDTH[record.peak]  # the layers' count keeps 32-bit activations
    infos = layer_infos(count.get("layer_infos") or [])
    rows = layer_rows(work, count.get("by_layer"), activation_width=width, infos=infos)
    return rows_card(work, rows, record.name, optimizer)


def rows_card(
    work: WorkCount,
    rows: tuple[LayerRow, ...],
    precision: str = "bf16",
    optimizer: str | float = "adam",
) -> ModelCard:
    """A card of `rows`, the layers of the counted step `work`."""
    if not rows:
        raise GpkError(f"the count from {work.source} names no layer; a card needs at least one")
    kept = [row.kept_bytes for row in rows]
    return ModelCard(
        parameters=float(work.parameters or sum(row.parameters for row in rows)),
        layers=len(rows),
        hidden=0,
        heads=0,
        sequence=1,
        flops_per_sample=work.flops_per_sample,
        activation_bytes=sum(kept) / len(kept),
        precision=precision,
        optimizer=optimizer,
        kernels_per_block=max(work.kernels / len(rows), 1e-9),
        attention_scores_bytes=0.0,
        rows=rows,
        step_flops=work.flops_per_step,
        step_bytes=fusion(work) * work.bytes_per_step,
    )


@dataclass(frozen=True)
class RoutedExperts:
    """A mixture of experts as the count read it, and what its dense banks counted beyond
    dispatched training, per block and sample."""

    experts: int = 0
    top_k: int = 0
    parameters: float = 0.0  # every block's expert weights
    flops_saved: float = 0.0  # the dense banks' FLOPs on the experts a token skips
    kept_saved: float = 0.0  # their kept outputs beyond the top-k's, at the capacity factor


def routed_experts(
    found: dict[str, Any],
    blocks: int,
    sequence: int,
    precision: str,
    kept_by_path: dict[str, float] | None = None,
) -> RoutedExperts:
    """The count's experts (`worker/expert_banks.py`: "experts", "top_k", "expert_parameters",
    "expert_outputs", "bank_paths") and what its dense banks did beyond top-k ÷ experts of them:
    each weight's 6 FLOPs a token on the experts not routed to, and what the banks keep for
    E − c·k of the E experts (c the capacity factor); nothing for a dense model.

    What a bank keeps is read off the count where it names the banks' layers (`kept_by_path`,
    each layer's kept bytes per sample, and "bank_paths"): everything the dense bank keeps is
    per expert and token, so a dispatched bank keeps c·k ÷ E of it. A count made before it named
    them falls back to the stacked matmuls' outputs, which leave out the bank's other kept
    values (its float32 copies and gated products) and so take off too little."""
    experts, top_k = int(found.get("experts") or 0), int(found.get("top_k") or 0)
    if experts < 2:
        return RoutedExperts()
    skipped = 1 - top_k / experts
    parameters = float(found.get("expert_parameters") or 0.0)
    flops = TRAINING_FLOPS_PER_WEIGHT * sequence * parameters / blocks * skipped
    banks = bank_kept_bytes(found.get("bank_paths") or [], kept_by_path or {}) / blocks
    if banks > 0:
        kept = banks * max(0.0, 1 - CAPACITY_FACTOR * top_k / experts)
    else:
        outputs = float(found.get("expert_outputs") or 0.0) / blocks  # one expert's, a token
        width = state_bytes("sgd", precision).activation
        kept = width * sequence * outputs * max(0.0, experts - CAPACITY_FACTOR * top_k)
    return RoutedExperts(experts, top_k, parameters, flops, kept)


def bank_kept_bytes(bank_paths: list[str], kept_by_path: dict[str, float]) -> float:
    """What the count's layers inside the expert banks keep, per sample, all blocks: every
    residual whose layer path holds a bank's path, whole names only.

    >>> bank_kept_bytes(["block/moe/experts"],
    ...                 {"model/block/moe/experts": 8.0, "model/block/moe/experts/einsum": 2.0,
    ...                  "model/block/moe/experts_norm": 5.0, "model/block/attention": 3.0})
    10.0
    """
    found = 0.0
    for path, kept in kept_by_path.items():
        whole = f"/{path}/"
        if any(f"/{bank}/" in whole for bank in bank_paths):
            found += float(kept)
    return found


def block_scores(count: dict[str, Any], blocks: int) -> float | None:
    """The s² residuals one block keeps per sample, as the trace found them (an attention's
    scores, softmax and mask, whatever op computes them): a count by depth's slope, else the
    whole step's over the blocks; None for a count made before they were read."""
    slope = (count.get("per_block") or {}).get("scores_bytes")
    if slope is not None:
        return max(float(slope), 0.0)
    found = count.get("scores_bytes")
    return None if found is None else float(found) / blocks


def block_activations(count: dict[str, Any], blocks: int) -> float:
    """What backpropagation keeps of one block per sample: the mean of the blocks' entries in
    the count's activations by layer, else the whole step's kept bytes over the blocks (which
    then carries the embeddings' and the head's share too)."""
    by_layer = count.get("by_layer") or {}
    names = (count.get("structure") or {}).get("block_names") or []
    kept = [by_layer[n] for n in names if n in by_layer]
    if kept:
        return float(sum(kept)) / len(kept)
    return float(count.get("kept_bytes", 0.0)) / blocks


def block_kernels(count: dict[str, Any], blocks: int) -> float:
    """The kernels one block launches per micro-batch: the slope of a count by depth (what one
    more block adds to the compiled step), else the whole step's over the blocks (which then
    carries the embeddings', the head's and the update's too), else Megatron-LM's
    `KERNELS_PER_BLOCK` for a count made before kernels were counted."""
    slope = (count.get("per_block") or {}).get("kernels")
    if slope is not None and slope > 0:
        return float(slope)
    kernels = count.get("kernels") or 0
    return float(kernels) / blocks if kernels > 0 else KERNELS_PER_BLOCK
