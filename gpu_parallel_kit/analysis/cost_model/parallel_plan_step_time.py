"""A parallel plan's training step on a GPU cluster, in closed form, and what bounds it.

Compute is on the roofline (`roofline.py`'s max(flops / peak, bytes / bandwidth) / efficiency,
floored by kernels · launch); each axis's collectives are timed on the link `cluster.links()`
places them on; a pipeline adds its schedule's bubble and the sends of its fill and drain.
docs/planning.md gives the formulas and sources.
"""

from __future__ import annotations

import functools

from ...pipeline.schedules import ONE_F_ONE_B
from ...pipeline.simulation import theoretical_bubble
from .gpu_cluster import GPUCluster
from .hardware_presets import Interconnect
from .model_card import ModelCard
from .parallel_plan import Plan
from .roofline import DEFAULT_EFFICIENCY, LAUNCH_S, Efficiency
from .step_time_model import ring_all_reduce_s
from .training_precision import training_precision

# The compute part's three terms (`step_time`), and the bound each names when it rules.
COMPUTE_TERMS = {"flops": "compute", "memory-bandwidth": "memory-bandwidth", "launches": "launches"}
PARTS = ("compute", "comm:tensor", "comm:data", "comm:stages", "bubble")


def step_time(
    card: ModelCard, plan: Plan, cluster: GPUCluster, efficiency: Efficiency = DEFAULT_EFFICIENCY
) -> dict[str, float | str]:
    """The step's seconds at the efficiency band's likely, low and high ends, its parts, and
    what bounds it (the largest part)."""
    links = _links(cluster, plan.data, plan.tensor, plan.stages)
    gpus = cluster.gpus
    samples = plan.data * plan.micro_batch_size * plan.micro_batches
    model_flops = card.flops_per_sample * samples / gpus
    # Full recomputation runs each forward twice: a third more work (a forward is 1/3 of it).
    flops = model_flops * (4 / 3 if plan.checkpointing == "full" else 1.0)
    peak = cluster.device.peak_flops(training_precision(card.precision).peak)
    terms = _compute_terms(card, plan, cluster, flops / peak)
    tensor_s = _tensor_comm_s(card, plan, links["tensor"])
    data_s = _data_comm_s(card, plan, links["data"])
    sends_s = _stage_sends_s(card, plan, links["stages"])
    bubble = theoretical_bubble(
        plan.schedule if plan.stages > 1 else ONE_F_ONE_B.name,
        plan.stages,
        plan.micro_batches,
        plan.virtual_stages,
    )
    found: dict[str, float] = {}
    parts: dict[str, float] = {}
    for end in ("likely", "low", "high"):
        share = efficiency.at(end)
        compute = max(terms["flops"] / share, terms["memory-bandwidth"] / share, terms["launches"])
        busy = compute + tensor_s
        idle = busy * bubble / (1 - bubble)
        # The gradients' collectives overlap the backward (about 2/3 of the compute).
        exposed = max(0.0, data_s - 2 / 3 * compute) if plan.sharding != "fsdp" else data_s
        found[end] = busy + idle + exposed + sends_s
        if end == "likely":
            parts = {
                "compute": compute,
                "comm:tensor": tensor_s,
                "comm:data": exposed,
                "comm:stages": sends_s,
                "bubble": idle,
            }
    likely = efficiency.at("likely")
    row = {
        "step_time_s": found["likely"],
        "step_time_low_s": found["high"],  # the high efficiency gives the short step
        "step_time_high_s": found["low"],
        "model_tflops_per_device": model_flops / found["likely"] / 1e12,
        "mfu": model_flops / found["likely"] / peak,
        **{f"{name}_s": seconds for name, seconds in parts.items()},
        "flops_s": terms["flops"] / likely,
        "memory-bandwidth_s": terms["memory-bandwidth"] / likely,
        "launches_s": terms["launches"],
    }
    return {**row, "bound": bound(row)}


def bound(row: dict[str, float | str]) -> str:
    """What bounds a row's step: its largest part, the compute part named by the term that
    rules it ("compute" for the FLOPs, "memory-bandwidth" for the bytes, "launches" for the
    kernels' floor)."""
    largest = max(PARTS, key=lambda part: row[f"{part}_s"])
    if largest != "compute":
        return largest
    return COMPUTE_TERMS[max(COMPUTE_TERMS, key=lambda term: row[f"{term}_s"])]


@functools.lru_cache(maxsize=4096)
def _links(cluster: GPUCluster, data: int, tensor: int, stages: int) -> dict:
    return cluster.links(data=data, tensor=tensor, stages=stages)


def _compute_terms(
    card: ModelCard, plan: Plan, cluster: GPUCluster, flops_s: float
) -> dict[str, float]:
    """One device's step on the roofline before the efficiency: the FLOPs at peak, the bytes at
    the memory's bandwidth, and the kernels' launch floor (full recomputation runs each
    forward twice: its weights are read once more and its kernels launched again)."""
    recompute = plan.checkpointing == "full"
    per_micro_batch = card.moved_bytes(plan.tensor, plan.stages, plan.micro_batch_size)
    if recompute:
        per_micro_batch += card.parameters / (plan.tensor * plan.stages) * card.state.params
    moved = per_micro_batch * plan.micro_batches + card.update_bytes(plan)
    kernels = card.kernels_per_block * card.layers / plan.stages * plan.micro_batches
    return {
        "flops": flops_s,
        "memory-bandwidth": moved / cluster.device.memory_bandwidth_bytes_s,
        "launches": kernels * (4 / 3 if recompute else 1.0) * LAUNCH_S,
    }


def _tensor_comm_s(card: ModelCard, plan: Plan, link: Interconnect | None) -> float:
    """Megatron's four all-reduces of a block's activations per micro-batch (two forward, two
    backward), for the stage's blocks and every micro-batch."""
    if link is None:
        return 0.0
    message = card.activation_send_bytes * plan.micro_batch_size
    per_block = 4 * ring_all_reduce_s(message, plan.tensor, link)
    return per_block * card.layers / plan.stages * plan.micro_batches


def _data_comm_s(card: ModelCard, plan: Plan, link: Interconnect | None) -> float:
    """The gradients' all-reduce (or reduce-scatter and all-gather, the same bytes) over the
    data axis, and fsdp's gathers on top: 1.5 times the bytes."""
    if link is None:
        return 0.0
    grads = card.parameters / (plan.tensor * plan.stages) * card.state.grads
    factor = 1.5 if plan.sharding == "fsdp" else 1.0
    return factor * ring_all_reduce_s(grads, plan.data, link)


def _stage_sends_s(card: ModelCard, plan: Plan, link: Interconnect | None) -> float:
    """The sends a pipeline cannot hide: the fill and the drain, one activation and one gradient
    message across each of the K−1 cuts."""
    if link is None:
        return 0.0
    message = card.activation_send_bytes * plan.micro_batch_size / plan.tensor
    return 2 * (plan.stages - 1) * link.send_s(message)
