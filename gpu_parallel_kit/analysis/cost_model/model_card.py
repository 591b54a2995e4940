"""A Transformer's model card: what a parallel plan needs of it, counted once, and the card made
from a counted step.

The card holds the count's parameters and FLOPs per sample, the structure the model says (or the
user gives), the activations one block keeps (the mean of the count's blocks) and the kernels
one block launches (the compiled step's). What a block keeps on one of `tensor` devices follows
Korthikanti et al. (2022); docs/planning.md gives the formulas and sources.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import GpkError, whole_number
from .training_precision import SHARDED_BY_DATA, StateBytes, state_bytes

if TYPE_CHECKING:
    from .parallel_plan import Plan

# Kernels one Transformer block launches per micro-batch when the count does not say: Megatron-LM's
# fused forward is 12 (2 layer norms, the QKV, projection and two MLP matmuls, the two batched
# attention matmuls, the fused scale-mask-softmax, two bias-dropout-adds, the bias-GeLU), and the
# backward launches about twice as many (Shoeybi et al. 2019; Korthikanti et al. 2022).
KERNELS_PER_BLOCK = 36.0
STRUCTURE = ("blocks", "hidden", "heads")


@dataclass(frozen=True)
class ModelCard:
    """What a plan needs of a Transformer, counted once (`worker/jax/abstract_count.py`).

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

    def __post_init__(self) -> None:
        state_bytes(self.optimizer, self.precision)  # one sentence for an unknown name
        if not self.kernels_per_block > 0:
            raise GpkError(
                f"kernels_per_block={self.kernels_per_block} must be above 0; e.g. "
                f"{KERNELS_PER_BLOCK:g}, Megatron-LM's fused block"
            )

    @functools.cached_property
    def state(self) -> StateBytes:
        """Bytes per parameter of each model state (`training_precision.StateBytes`)."""
        return state_bytes(self.optimizer, self.precision)

    @property
    def score_bytes(self) -> float:
        """The attention scores, softmax and dropout mask per block and sample: 5·a·s² at 16
        bits (two values and a one-byte mask per score)."""
        return (2.0 * self.state.activation + 1.0) * self.heads * self.sequence**2

    @property
    def activation_send_bytes(self) -> float:
        """One sample's activations across a cut, or a tensor collective's message: 2·s·h at
        16 bits."""
        return self.state.activation * self.sequence * self.hidden

    def kept_bytes(self, tensor: int, checkpointing: str = "none") -> float:
        """What one block keeps per sample on one of `tensor` devices: with full checkpointing
        its input alone (2·s·h at 16 bits), else Korthikanti et al.'s split (the scores divide
        by t, and of the rest's 34·s·h, 24 divide by t and 10 do not)."""
        if checkpointing == "full":
            return self.activation_send_bytes
        rest = max(0.0, self.activation_bytes - self.score_bytes)
        return self.score_bytes / tensor + rest * (10 + 24 / tensor) / 34

    def moved_bytes(self, tensor: int, stages: int, micro_batch_size: int) -> float:
        """Bytes one device moves through its memory for one micro-batch of its stage: its shard
        of the weights read once in the forward and twice in the backward (the input's and the
        weights' gradients), its gradients written, and its blocks' kept activations written in
        the forward and read in the backward (Williams et al.'s roofline traffic, as
        `roofline.py` counts it; docs/planning.md)."""
        shard = self.parameters / (tensor * stages)
        weights = shard * (3 * self.state.params + self.state.grads)
        kept = self.kept_bytes(tensor) * self.layers / stages
        return weights + 2 * kept * micro_batch_size

    def update_bytes(self, plan: Plan) -> float:
        """Bytes the optimizer's update moves on one device once a step: the optimizer state of
        its slice read and written, that slice's gradients read and weights written."""
        shard = self.parameters / (plan.tensor * plan.stages)
        slice_ = shard / (plan.data if SHARDED_BY_DATA[plan.sharding][2] else 1)
        return slice_ * (2 * self.state.optimizer + self.state.grads + self.state.params)


def model_card(
    count: dict[str, Any],
    precision: str,
    optimizer: Any,
    name: str,
    *,
    blocks: int | None = None,
    hidden: int | None = None,
    heads: int | None = None,
    sequence: int | None = None,
) -> ModelCard:
    """The card of a counted step (`worker/jax/plan_count.py`'s answer, one sample counted).

    `blocks`, `hidden` and `heads` the user passed each win over what the model says; `sequence`
    is the tokens per sample, given or read off the sample. The search plans Transformer stacks
    only (its cost model times their blocks), so a model with neither a keras-hub backbone nor
    several attention layers is refused in one sentence that says so and names the keywords
    still missing."""
    said = count.get("structure") or {}
    given = {"blocks": blocks, "hidden": hidden, "heads": heads}
    figures = {k: given[k] if given[k] is not None else said.get(k) for k in STRUCTURE}
    missing = [k for k in STRUCTURE if figures[k] is None] + (["sequence"] if not sequence else [])
    keywords = ", ".join(f"{k}=" for k in missing)
    if any(k in missing for k in STRUCTURE):
        raise GpkError(
            f"{name} is not a Transformer stack the search can read (neither a keras-hub "
            "backbone nor a model with several attention layers), and the plan search plans "
            f"Transformer stacks only; for a Transformer it cannot read, pass {keywords}"
        )
    if missing:
        raise GpkError(
            f"{name}'s sample has no sequence axis to read its tokens per sample from; "
            "pass sequence="
        )
    layers, width, attention_heads = (whole_number(figures[k], k) for k in STRUCTURE)
    sequence = whole_number(sequence, "sequence")
    return ModelCard(
        parameters=float(count["parameters"]),
        layers=layers,
        hidden=width,
        heads=attention_heads,
        sequence=sequence,
        flops_per_sample=float(count["flops"]),
        activation_bytes=block_activations(count, layers),
        precision=precision,
        optimizer=optimizer,
        kernels_per_block=block_kernels(count, layers),
    )


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
