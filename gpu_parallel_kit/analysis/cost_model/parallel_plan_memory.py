"""A parallel plan's memory on its fullest device: its model states and its activations.

The model states follow ZeRO (`training_precision.model_state_bytes`: mixed-precision Adam's
2 + 2 + 12 bytes per parameter, fp32's 4 + 4 + 8, the optimizer's sharded by zero-1, the
gradients too by zero-2, everything by fsdp) for the parameters of each stage
(`stage_split.py`: its blocks, the embedding on the first, the head on the last, and K and V's
copies where the tensor axis outgrows their heads); the activations are what each block keeps
(`ModelCard.kept_bytes`, Korthikanti et al.) for the micro-batches the stage holds in flight,
divided by the context axis. A mixture of experts' expert weights, and their gradients and
optimizer state, are further divided by the expert axis, and ZeRO shards them over the replicas
that hold the same experts. docs/planning.md gives the formulas and sources.
"""

from __future__ import annotations

from ...pipeline.schedules import INTERLEAVED
from .model_card import ModelCard
from .parallel_plan import FULL, Plan
from .stage_split import StageSplit, split_of, stage_split
from .training_precision import model_state_bytes

RESERVE = 0.1  # of a device's memory kept for the framework, buffers and fragmentation


def memory(card: ModelCard, plan: Plan) -> dict[str, float]:
    """Bytes on the fullest device, by part: its share of the parameters, gradients and Adam's
    state under the plan's sharding, and the activations of the micro-batches in flight."""
    split = plan_split(card, plan)
    kept = card.kept_bytes(plan.tensor, plan.checkpointing, plan.attention, plan.sequence_parallel)
    rebuilt = 0.0
    if plan.checkpointing == FULL:  # one block's activations rebuilt during its backward
        rebuilt = card.kept_bytes(plan.tensor, "none", plan.attention, plan.sequence_parallel)
    copies = card.key_value_parameters * card.key_value_copies(plan.tensor)
    # The first stage holds the most micro-batches and the embedding, the last the head; the
    # second is fuller than the first only with more blocks.
    last = plan.stages - 1
    candidates = {0, last} | ({1} if last > 1 and split.blocks[1] > split.blocks[0] else set())
    found: dict[str, float] = {}
    for stage in sorted(candidates):
        parts = _stage_memory(card, plan, split, stage, (kept, rebuilt, copies))
        if sum(parts.values()) > sum(found.values()):
            found = parts
    return found


def plan_split(card: ModelCard, plan: Plan) -> StageSplit:
    """The plan's stages: its own blocks per stage where it names them, else balanced."""
    if plan.stage_blocks:
        return split_of(card, tuple(plan.stage_blocks))
    return stage_split(card, plan.stages, even=plan.virtual_stages > 1)


def device_parameters(card: ModelCard, plan: Plan, split: StageSplit, stage: int) -> float:
    """One device's parameters on `stage`: the stage's split by tensor, its experts further by
    the expert axis, and K and V's copies."""
    copies = card.key_value_parameters * card.key_value_copies(plan.tensor)
    experts = expert_parameters(card, plan, split, stage)
    return split.parameters[stage] / plan.tensor + split.blocks[stage] * copies - experts


def expert_parameters(card: ModelCard, plan: Plan, split: StageSplit, stage: int) -> float:
    """What the expert axis takes off one device of `stage`: the share of its blocks' expert
    weights (split by tensor) that the other devices of its expert group hold; 0 for a
    dense model or an expert axis of one."""
    if plan.expert == 1:
        return 0.0
    held = split.blocks[stage] * card.block_expert_parameters / plan.tensor
    return held * (1 - 1 / plan.expert)


def _stage_memory(
    card: ModelCard,
    plan: Plan,
    split: StageSplit,
    stage: int,
    block: tuple[float, float, float],
) -> dict[str, float]:
    """Bytes on a device of `stage`, by part; `block` is what one block keeps of a sample,
    what a rebuilt one holds, and its K and V's copied parameters."""
    kept, rebuilt, copies = block
    replicas = plan.data * plan.context  # ZeRO shards over every copy of the weights
    parameters = split.parameters[stage] / plan.tensor + split.blocks[stage] * copies
    states = model_state_bytes(parameters, card.state, replicas, 1, 1, plan.sharding)
    if plan.expert > 1:  # the experts a device keeps, sharded over the fewer copies of them
        experts = split.blocks[stage] * card.block_expert_parameters / plan.tensor
        dense = model_state_bytes(parameters - experts, card.state, replicas, 1, 1, plan.sharding)
        held = model_state_bytes(
            experts / plan.expert, card.state, replicas // plan.expert, 1, 1, plan.sharding
        )
        states = {part: dense[part] + held[part] for part in states}
    batch = plan.micro_batch_size / plan.context
    activations = (kept * split.blocks[stage] * _in_flight(plan, stage) + rebuilt) * batch
    if stage == plan.stages - 1:  # the logits the loss keeps, split by tensor as Megatron's
        activations += split.head_activation_bytes / plan.tensor * batch
    return {**states, "activations_bytes": activations}


def _in_flight(plan: Plan, stage: int = 0) -> float:
    """Micro-batches whose activations a stage holds at its peak: all of them without a
    pipeline's early backwards (one at a time under gradient accumulation), K − s on stage s
    under 1F1B and zb-h1, and interleaved's K·(1 + (K−1)/(K·v)) on the first (Narayanan et
    al. 2021)."""
    if plan.stages == 1:
        return 1.0
    k = min(plan.stages - stage, plan.micro_batches)
    if plan.schedule == INTERLEAVED.name:
        return k * (1 + (plan.stages - 1) / (plan.stages * plan.virtual_stages))
    return float(k)
