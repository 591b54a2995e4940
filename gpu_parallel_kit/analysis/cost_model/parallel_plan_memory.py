"""A parallel plan's memory on its fullest device: its model states and its activations.

The model states follow ZeRO (`training_precision.model_state_bytes`: mixed-precision Adam's
2 + 2 + 12 bytes per parameter, fp32's 4 + 4 + 8, the optimizer's sharded by zero-1, the
gradients too by zero-2, everything by fsdp); the activations are what each block keeps
(`ModelCard.kept_bytes`, Korthikanti et al.) for the micro-batches the first stage holds in
flight. docs/planning.md gives the formulas and sources.
"""

from __future__ import annotations

from ...pipeline.schedules import INTERLEAVED
from .model_card import ModelCard
from .parallel_plan import Plan
from .training_precision import model_state_bytes

RESERVE = 0.1  # of a device's memory kept for the framework, buffers and fragmentation


def memory(card: ModelCard, plan: Plan) -> dict[str, float]:
    """Bytes on the fullest device, by part: its share of the parameters, gradients and Adam's
    state under the plan's sharding, and the activations of the micro-batches in flight."""
    states = model_state_bytes(
        card.parameters, card.state, plan.data, plan.tensor, plan.stages, plan.sharding
    )
    per_block = card.kept_bytes(plan.tensor, plan.checkpointing)
    blocks = card.layers / plan.stages
    activations = per_block * blocks * plan.micro_batch_size * _in_flight(plan)
    if plan.checkpointing == "full":  # one block's activations rebuilt during its backward
        activations += card.kept_bytes(plan.tensor) * plan.micro_batch_size
    return {**states, "activations_bytes": activations}


def _in_flight(plan: Plan) -> float:
    """Micro-batches whose activations the first stage holds at its peak: all of them without a
    pipeline's early backwards (one at a time under gradient accumulation), K under 1F1B and
    zb-h1, and interleaved's K·(1 + (K−1)/(K·v)) (Narayanan et al. 2021)."""
    if plan.stages == 1:
        return 1.0
    k = min(plan.stages, plan.micro_batches)
    if plan.schedule == INTERLEAVED.name:
        return k * (1 + (plan.stages - 1) / (plan.stages * plan.virtual_stages))
    return float(k)
