"""A model's blocks cut into pipeline stages by counted time, and what one device of a stage
holds, keeps and sends under a plan.

A Transformer's blocks are cut with the embedding on the first stage and the language-model
head on the last; a card of rows (`layer_rows.py`) is cut between its layers, each stage's
figures the sum of its rows'.

The card says one block's parameters and FLOPs (a count by depth's slope) and the vocabulary;
the embedding (V·h parameters, next to no FLOPs) sits on the first stage, and the head (its
V·h weights, or a copy of the tied embedding's, as Megatron-LM keeps one, and 6·s·h·V FLOPs a
sample) on the last. The blocks are balanced over the stages by `pipeline.partition.solve` on
their FLOPs with the edges' added to the first and last block, so stages need not divide the
blocks: 94 blocks on 8 stages is "11-12-12-12-12-12-12-11" or so, the edges taking one block
fewer where their work weighs one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import GpkError
from ...pipeline.partition import solve
from .layer_rows import LayerRow
from .model_card import ModelCard

if TYPE_CHECKING:
    from .parallel_plan import Plan


@dataclass(frozen=True)
class StageSplit:
    """Each stage's blocks and what it holds and computes, before any tensor split.

    Args:
        blocks: the blocks of each stage, first to last.
        parameters: each stage's parameters, its edge's included.
        flops: each stage's forward and backward FLOPs of one sample, as the count made them.
        head_activation_bytes: what the head keeps of one sample for the loss's backward on
            the last stage (its logits at the activations' width).
        block_flops: one block's forward and backward FLOPs of one sample.
        rows: a card of rows' layers on each stage (empty for a Transformer's).
        first: the index of each stage's first row.
    """

    blocks: tuple[int, ...]
    parameters: tuple[float, ...]
    flops: tuple[float, ...]
    head_activation_bytes: float
    block_flops: float = 0.0
    rows: tuple[tuple[LayerRow, ...], ...] = ()
    first: tuple[int, ...] = ()

    @functools.cached_property
    def candidates(self) -> tuple[int, ...]:
        """The stages one of which computes the most, whatever is added per block: the last
        (the head's) and the first of the others with the most blocks; every stage of a card
        of rows, whose layers differ."""
        last = len(self.blocks) - 1
        if self.rows:
            return tuple(range(last + 1))
        if last == 0:
            return (0,)
        widest = max(range(last), key=self.blocks.__getitem__)
        return (widest, last)

    def __repr__(self) -> str:
        return f"<StageSplit {blocks_text(self.blocks)}>"


@dataclass(frozen=True)
class EdgeWork:
    """One block's figures and the embedding's and the head's, from a card."""

    block_parameters: float
    block_flops: float  # forward and backward, one sample
    embedding_parameters: float
    head_parameters: float
    head_flops: float


def edge_work(card: ModelCard) -> EdgeWork:
    """The block's and the edges' figures: the card's own block figures where it has them, else
    what the embedding (V·h) and the head (6·s·h·V FLOPs) leave of the whole, shared by the
    blocks. Without a vocabulary, the blocks carry everything, as a card before edges did."""
    table = card.vocabulary * card.hidden
    head_flops = 6.0 * card.sequence * card.hidden * card.vocabulary
    if card.block_flops is not None:
        head_flops = max(0.0, card.flops_per_sample - card.block_flops * card.layers)
        block_flops = card.block_flops
    else:
        block_flops = (card.flops_per_sample - head_flops) / card.layers
    if card.block_parameters is not None:
        block_parameters = card.block_parameters
        outside = max(0.0, card.parameters - block_parameters * card.layers)
        embedding = min(table, outside)
        head = max(outside - embedding, 0.0) or embedding  # a tied head: a copy on the last stage
    else:
        block_parameters = (card.parameters - table) / card.layers
        embedding = head = table
    if block_flops <= 0 or block_parameters <= 0:
        raise GpkError(
            f"the card's vocabulary of {card.vocabulary} leaves no work for its {card.layers} "
            "blocks; give the vocabulary of the model's embedding, or 0"
        )
    return EdgeWork(block_parameters, block_flops, embedding, head, head_flops)


def blocks_text(blocks: tuple[int, ...]) -> str:
    """ "7-8-8-…-8-7": each stage's blocks, a long middle run of one count elided."""
    if len(blocks) > 6 and len(set(blocks[2:-2])) == 1:
        return f"{blocks[0]}-{blocks[1]}-…-{blocks[-2]}-{blocks[-1]}"
    return "-".join(str(b) for b in blocks)


@functools.lru_cache(maxsize=1024)
def stage_split(card: ModelCard, stages: int, even: bool = False) -> StageSplit:
    """`card`'s blocks over `stages` stages, balanced by counted FLOPs (`even`: the same
    number on each, as an interleaved schedule's chunks need).

    Args:
        card: the model's counted figures.
        stages: the pipeline's stages, at most the blocks.
        even: split the blocks evenly (the stages must divide them).
    """
    if not 1 <= stages <= card.layers:
        raise GpkError(
            f"stages={stages} cannot each hold a block of {card.layers}; use 1 to {card.layers}"
        )
    if card.rows and not (even or stages == 1):
        return split_of(card, _row_cut(tuple(row.flops for row in card.rows), stages))
    if even or stages == 1:
        if card.layers % stages:
            raise GpkError(
                f"stages={stages} does not divide {card.layers} blocks evenly; use a divisor"
            )
        return split_of(card, (card.layers // stages,) * stages)
    work = edge_work(card)
    costs = [work.block_flops] * card.layers
    costs[-1] += work.head_flops
    return split_of(card, tuple(solve(costs, stages)))


@functools.lru_cache(maxsize=1024)
def split_of(card: ModelCard, blocks: tuple[int, ...]) -> StageSplit:
    """The stages that hold `blocks` blocks each, first to last, with their edges."""
    if sum(blocks) != card.layers or min(blocks) < 1:
        raise GpkError(
            f"stage blocks {blocks_text(blocks)} do not give each stage a block and sum to "
            f"the model's {card.layers}; give one count a stage, e.g. {_example(card.layers)}"
        )
    if card.rows:
        return _rows_split(card, blocks)
    logits = card.state.activation * card.sequence * card.vocabulary
    work = edge_work(card)
    if len(blocks) == 1:
        return StageSplit(
            blocks, (card.parameters,), (card.flops_per_sample,), logits, work.block_flops
        )
    parameters = [n * work.block_parameters for n in blocks]
    flops = [n * work.block_flops for n in blocks]
    parameters[0] += work.embedding_parameters
    parameters[-1] += work.head_parameters
    flops[-1] += work.head_flops
    return StageSplit(blocks, tuple(parameters), tuple(flops), logits, work.block_flops)


def _rows_split(card: ModelCard, blocks: tuple[int, ...]) -> StageSplit:
    """A card of rows cut after each stage's `blocks` layers."""
    cut, first, start = [], [], 0
    for size in blocks:
        first.append(start)
        cut.append(card.rows[start : start + size])
        start += size
    return StageSplit(
        blocks,
        tuple(float(sum(row.parameters for row in rows)) for rows in cut),
        tuple(math.fsum(row.flops for row in rows) for rows in cut),
        0.0,
        rows=tuple(cut),
        first=tuple(first),
    )


@functools.lru_cache(maxsize=256)
def _row_cut(flops: tuple[float, ...], stages: int) -> tuple[int, ...]:
    # a layer without FLOPs (a reshape, a pooling) still takes a little: a cut may not be empty
    floor = max(flops) * 1e-6 if any(flops) else 1.0
    return tuple(solve([max(f, floor) for f in flops], stages))


def plan_split(card: ModelCard, plan: Plan) -> StageSplit:
    """The plan's stages: its own blocks per stage where it names them, else balanced."""
    if plan.stage_blocks:
        return split_of(card, tuple(plan.stage_blocks))
    return stage_split(card, plan.stages, even=plan.virtual_stages > 1)


def stage_parameters(card: ModelCard, plan: Plan, split: StageSplit, stage: int) -> float:
    """One device's parameters of `stage` under the plan's tensor axis, before K and V's copies
    and the expert axis: a Transformer's split evenly, a card of rows' as the layout splits
    each layer."""
    if not split.rows:
        return split.parameters[stage] / plan.tensor
    return rows_on_device(card, plan, split, stage, lambda row: row.parameters)


def stage_work(card: ModelCard, plan: Plan, split: StageSplit, stage: int) -> float:
    """One device's counted FLOPs of `stage` per sample under the plan's tensor axis."""
    if not split.rows:
        return split.flops[stage] / plan.tensor
    return rows_on_device(card, plan, split, stage, lambda row: row.flops)


def rows_on_device(
    card: ModelCard,
    plan: Plan,
    split: StageSplit,
    stage: int,
    figure: Callable[[LayerRow], float],
) -> float:
    """A card of rows' `figure` summed over `stage`'s layers, each at the share of it one
    device of the plan's tensor axis keeps (`layer_rows.LayerSplit.kept`)."""
    kept = card.layer_split(plan.tensor).kept
    start = split.first[stage]
    return math.fsum(figure(row) * kept[start + i] for i, row in enumerate(split.rows[stage]))


def device_parameters(card: ModelCard, plan: Plan, split: StageSplit, stage: int) -> float:
    """One device's parameters on `stage`: the stage's split by tensor, its experts further by
    the expert axis, and K and V's copies."""
    copies = card.key_value_parameters * card.key_value_copies(plan.tensor)
    experts = expert_parameters(card, plan, split, stage)
    return stage_parameters(card, plan, split, stage) + split.blocks[stage] * copies - experts


def expert_parameters(card: ModelCard, plan: Plan, split: StageSplit, stage: int) -> float:
    """What the expert axis takes off one device of `stage`: the share of its blocks' expert
    weights (split by tensor) that the other devices of its expert group hold; 0 for a
    dense model or an expert axis of one."""
    if plan.expert == 1:
        return 0.0
    held = split.blocks[stage] * card.block_expert_parameters / plan.tensor
    return held * (1 - 1 / plan.expert)


def stage_kept(
    card: ModelCard, plan: Plan, split: StageSplit, stage: int, checkpointing: str
) -> float:
    """What one device of `stage` keeps of one sample for the backward: its blocks' kept
    bytes (`ModelCard.kept_bytes`, under `checkpointing`), or its rows'."""
    if split.rows:
        return math.fsum(row.kept_bytes for row in split.rows[stage])
    kept = card.kept_bytes(plan.tensor, checkpointing, plan.attention, plan.sequence_parallel)
    return kept * split.blocks[stage]


def stage_messages(
    card: ModelCard, plan: Plan, split: StageSplit, stage: int
) -> tuple[tuple[float, float], ...]:
    """The tensor axis's all-reduces of activations on one device of `stage` per micro-batch
    sample: (bytes, how many) pairs. A Transformer block's four (Megatron's two forward and
    two backward, each s·h values), a card of rows' as the layout places them."""
    if plan.tensor == 1:
        return ()
    if not split.rows:
        return ((card.activation_send_bytes, 4.0 * split.blocks[stage]),)
    messages = card.layer_split(plan.tensor).messages
    start = split.first[stage]
    return tuple(
        (message, 1.0) for i in range(len(split.rows[stage])) for message in messages[start + i]
    )


def cut_bytes(card: ModelCard, plan: Plan, split: StageSplit) -> float:
    """What crosses a cut between stages per sample on one device: a Transformer block's
    output split by tensor, a card of rows' widest stage output (what its last layer keeps)."""
    if not split.rows:
        return card.activation_send_bytes / plan.tensor
    return max((rows[-1].kept_bytes for rows in split.rows[:-1]), default=0.0)


def _example(layers: int) -> str:
    half = layers // 2
    return f"({half}, {layers - half})"
