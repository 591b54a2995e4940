"""A counted step made the plan search's `ModelCard`: the count's parameters and FLOPs per
sample, the structure the model says (or the user gives), the activations of one block from
the count's activations by layer, and the kernels one block launches from the compiled step's."""

from __future__ import annotations

from typing import Any

from ..errors import GpkError, whole_number
from .plan_search import KERNELS_PER_BLOCK, ModelCard
from .sample_inputs import sequence_of

STRUCTURE = ("blocks", "hidden", "heads")


def model_card(
    count: dict[str, Any],
    spec: Any,
    precision: str,
    optimizer: Any,
    name: str,
    **given: int | None,
) -> ModelCard:
    """The card of a counted step (`worker/jax/plan_count.py`'s answer, one sample counted).

    `given` holds `blocks=`, `hidden=`, `heads=` and `sequence=` the user passed; each wins over
    what the model says. The search plans Transformer stacks only (its cost model times their
    blocks), so a model with neither a keras-hub backbone nor several attention layers is
    refused in one sentence that says so and names the keywords still missing."""
    said = count.get("structure") or {}
    figures = {k: given.get(k) if given.get(k) is not None else said.get(k) for k in STRUCTURE}
    sequence = given.get("sequence") or sequence_of(spec)
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
    blocks, hidden, heads = (whole_number(figures[k], k) for k in STRUCTURE)
    sequence = whole_number(sequence, "sequence")
    return ModelCard(
        parameters=float(count["parameters"]),
        layers=blocks,
        hidden=hidden,
        heads=heads,
        sequence=sequence,
        flops_per_sample=float(count["flops"]),
        activation_bytes=block_activations(count, blocks),
        precision=precision,
        optimizer=optimizer,
        kernels_per_block=block_kernels(count, blocks),
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
