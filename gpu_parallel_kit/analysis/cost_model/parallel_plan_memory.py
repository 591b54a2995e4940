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
from .plan_figures import MemoryByPart
from .stage_split import StageSplit, plan_split, stage_kept, stage_parameters
from .training_precision import model_state_bytes

RESERVE = 0.1  # of a device's memory kept for the framework, buffers and fragmentation


def memory(card: ModelCard, plan: Plan) -> MemoryByPart:
    """Bytes on the fullest device, by part: its share of the parameters, gradients and Adam's
    state under the plan's sharding, and the activations of the micro-batches in flight."""
    split = plan_split(card, plan)
    rebuilt = 0.0
    if plan.checkpointing == FULL:  # one block's activations rebuilt during its backward
        rebuilt = card.kept_bytes(plan.tensor, "none", plan.attention, plan.sequence_parallel)
    copies = card.key_value_parameters * card.key_value_copies(plan.tensor)
    # The first stage holds the most micro-batches and the embedding, the last the head; the
    # second is fuller than the first only with more blocks. A card of rows: any stage.
    last = plan.stages - 1
    candidates = {0, last} | ({1} if last > 1 and split.blocks[1] > split.blocks[0] else set())
    if split.rows:
        candidates = set(range(plan.stages))
    fullest = None
    for stage in sorted(candidates):  # the first of equals
        held = _stage_memory(card, plan, split, stage, (rebuilt, copies))
        if fullest is None or held.total > fullest.total:
            fullest = held
    return fullest


def _stage_memory(
    card: ModelCard,
    plan: Plan,
    split: StageSplit,
    stage: int,
    block: tuple[float, float],
) -> MemoryByPart:
    """Bytes on a device of `stage`, by part; `block` is what a rebuilt block holds of a
    sample, and its K and V's copied parameters."""
    rebuilt, copies = block
    replicas = plan.data * plan.context  # ZeRO shards over every copy of the weights
    parameters = stage_parameters(card, plan, split, stage) + split.blocks[stage] * copies
    states = model_state_bytes(parameters, card.state, replicas, 1, 1, plan.sharding)
    if plan.expert > 1:  # the experts a device keeps, sharded over the fewer copies of them
        experts = split.blocks[stage] * card.block_expert_parameters / plan.tensor
        dense = model_state_bytes(parameters - experts, card.state, replicas, 1, 1, plan.sharding)
        held = model_state_bytes(
            experts / plan.expert, card.state, replicas // plan.expert, 1, 1, plan.sharding
        )
        states = dense + held
    batch = plan.micro_batch_size / plan.context
    kept = stage_kept(card, plan, split, stage, plan.checkpointing)
    activations = (kept * _in_flight(plan, stage) + rebuilt) * batch
    if stage == plan.stages - 1:  # the logits the loss keeps, split by tensor as Megatron's
        activations += split.head_activation_bytes / plan.tensor * batch
    # A new record rather than `dataclasses.replace`: the search builds one for every plan.
    return MemoryByPart(states.params, states.grads, states.optimizer, activations)


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
