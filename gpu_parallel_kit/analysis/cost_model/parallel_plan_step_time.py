"""A parallel plan's training step on a GPU cluster, in closed form, and what bounds it.

Compute is on the roofline (`roofline.py`'s max(flops / peak, bytes / bandwidth) / efficiency,
floored by kernels · launch), and attention as written adds its scores' passes through memory,
memory-bound kernels no matmul hides (a fused kernel makes none); each axis's collectives are
timed on the link `cluster.links()` places them on; a pipeline adds its schedule's bubble and
the sends of its fill and drain. An expert axis adds its all-to-alls (each block's tokens to
their experts and back, forward and backward) and the busiest expert's share of the tokens,
the capacity factor over an even one.
docs/planning.md gives the formulas and sources.
"""

from __future__ import annotations

import functools
import math

from ...pipeline.schedules import ONE_F_ONE_B
from ...pipeline.simulation import theoretical_bubble
from .gpu_cluster import GPUCluster
from .hardware_presets import Interconnect
from .matmul_efficiency import MatmulEfficiency
from .model_card import FLASH, SELECTIVE, ModelCard
from .parallel_plan import FULL, Plan
from .plan_figures import ComputeTerms, StepParts, StepTime
from .roofline import ACTIVATION_WIDTH, LAUNCH_S, Efficiency
from .software_stack import SoftwareStack
from .stage_split import (
    StageSplit,
    cut_bytes,
    device_parameters,
    expert_parameters,
    plan_split,
    rows_on_device,
    stage_kept,
    stage_messages,
    stage_work,
)
from .step_time_model import ring_all_reduce_s
from .training_precision import training_precision

# A band or a matmul efficiency given alone hides collectives as a stack does by default.
DEFAULT_OVERLAP = SoftwareStack("default overlaps", MatmulEfficiency(1.0, 0.0))
# Full recomputation's collectives over the plain step's: the forward's half run twice.
FULL_RECOMPUTED_COLLECTIVES = 1.5


def step_time(
    card: ModelCard,
    plan: Plan,
    cluster: GPUCluster,
    efficiency: Efficiency | MatmulEfficiency | SoftwareStack | None = None,
) -> StepTime:
    """The step's seconds at the efficiency band's likely, low and high ends, its parts, and
    what bounds it (`plan_figures.StepTime`). The compute is the busiest stage's.

    `efficiency`: the software stack the step runs under (None: the cluster's), whose matmul
    efficiency gives the plan its own band by its matmuls' shapes on one device and whose
    overlaps hide collectives behind compute; or a band or a `MatmulEfficiency` alone, under
    the default overlaps."""
    stack = cluster.stack if efficiency is None else efficiency
    overlap = stack if isinstance(stack, SoftwareStack) else DEFAULT_OVERLAP
    efficiency = stack.for_plan(card, plan)
    links = _links(cluster, plan.data * plan.context, plan.tensor, plan.stages)
    gpus = cluster.gpus
    samples = plan.data * plan.micro_batch_size * plan.micro_batches
    model_flops = card.flops_per_sample * samples / gpus
    split = plan_split(card, plan)
    per_stage = stage_flops(card, plan, split, split.candidates)
    busiest = max(per_stage, key=per_stage.__getitem__)
    flops = per_stage[busiest] * plan.micro_batch_size * plan.micro_batches
    if card.step_flops:  # the update's, counted apart from the samples', in the stage's share
        flops += card.step_flops * per_stage[busiest] / card.flops_per_sample
    peak = _peak_flops(cluster, card.precision)
    terms = _compute_terms(card, plan, cluster, split, busiest, flops / peak)
    blocks = split.blocks[busiest]
    tensor_s = _tensor_comm_s(card, plan, links["tensor"], split, busiest)
    tensor_s *= 1 - overlap.tensor_overlap
    shard = device_parameters(card, plan, split, 0)
    data_s = _data_comm_s(card, plan, links["data"], shard)
    if plan.expert > 1:  # the experts' gradients reduce over the replicas holding them alone
        held = expert_parameters(card, plan, split, 0) / (plan.expert - 1)
        data_s = _data_comm_s(card, plan, links["data"], shard - held) + _data_comm_s(
            card, plan, links["data"], held, plan.expert
        )
    expert_s = _expert_comm_s(card, plan, cluster, blocks)
    sends_s = _stage_sends_s(card, plan, links["stages"], split)
    ring_s, attention_flops = _context_ring(card, plan, _context_link(cluster, plan))
    bubble = _bubble(
        plan.schedule if plan.stages > 1 else ONE_F_ONE_B.name,
        plan.stages,
        plan.micro_batches,
        plan.virtual_stages,
    )
    found: dict[str, float] = {}
    parts = StepParts(0.0)
    ends = (("likely", efficiency.likely), ("low", efficiency.low), ("high", efficiency.high))
    for end, share in ends:
        compute = max(terms.flops / share, terms.memory_bandwidth / share, terms.launches)
        compute += terms.attention_scores
        context_s = 0.0
        if ring_s:  # the ring's sends beyond the attention they run beside
            hidden = attention_flops / (peak * share)
            context_s = max(0.0, ring_s - hidden) * blocks * plan.micro_batches
        busy = compute + tensor_s + context_s + expert_s
        idle = busy * bubble / (1 - bubble)
        # The gradients' collectives overlap the backward, as far as the stack hides them.
        behind = overlap.data_overlap * compute if plan.sharding != "fsdp" else 0.0
        exposed = max(0.0, data_s - behind)
        found[end] = busy + idle + exposed + sends_s + overlap.step_fixed_s
        if end == "likely":
            parts = StepParts(
                compute + overlap.step_fixed_s, tensor_s, context_s, expert_s, exposed, sends_s,
                idle,
            )  # fmt: skip
    likely = efficiency.likely
    return StepTime(
        likely=found["likely"],
        short=found["high"],  # the high efficiency gives the short step
        long=found["low"],
        parts=parts,
        terms=ComputeTerms(
            terms.flops / likely,
            terms.memory_bandwidth / likely,
            terms.launches,
            terms.attention_scores,
        ),
        throughput_samples_s=samples / found["likely"],
        model_tflops_per_device=model_flops / found["likely"] / 1e12,
        mfu=model_flops / found["likely"] / peak,
    )


def stage_flops(
    card: ModelCard,
    plan: Plan,
    split: StageSplit | None = None,
    stages: tuple[int, ...] | None = None,
) -> dict[int, float]:
    """Each stage's FLOPs of one sample on one of its devices, recomputation included, by
    stage (`stages` only, where given).

    A stage's counted FLOPs split by tensor and context; on each block, what the plan computes
    again: full checkpointing its forward, selective its attention core, a fused attention's
    backward its QKᵀ and softmax; K and V's projections on the copies a tensor axis beyond
    their heads keeps (6·s FLOPs per weight, a sample); and under an expert axis, the busiest
    expert's tokens over an even share (the capacity factor) on each block's routed experts.
    """
    split = split or plan_split(card, plan)
    again = 0.0
    if plan.checkpointing == FULL:
        again += split.block_flops / 3  # a forward is a third of a block's work
    if plan.attention == FLASH:
        again += card.flash_recompute_flops
    elif plan.checkpointing == SELECTIVE:
        again += card.attention_core_flops
    if plan.expert > 1:
        again += card.block_expert_flops * (card.capacity_factor - 1)
    copies = 6.0 * card.sequence * card.key_value_parameters * card.key_value_copies(plan.tensor)
    return {
        stage: (stage_work(card, plan, split, stage) + split.blocks[stage] * again / plan.tensor)
        / plan.context
        + split.blocks[stage] * copies / plan.context
        for stage in (range(plan.stages) if stages is None else stages)
    }


# A search asks the same few (schedule, stages, micro-batches, chunks) thousands of times.
_bubble = functools.lru_cache(maxsize=4096)(theoretical_bubble)


@functools.lru_cache(maxsize=64)
def _peak_flops(cluster: GPUCluster, precision: str) -> float:
    return cluster.device.peak_flops(training_precision(precision).peak)


@functools.lru_cache(maxsize=4096)
def _links(cluster: GPUCluster, data: int, tensor: int, stages: int) -> dict:
    return cluster.links(data=data, tensor=tensor, stages=stages)


def _compute_terms(
    card: ModelCard, plan: Plan, cluster: GPUCluster, split: StageSplit, stage: int, flops_s: float
) -> ComputeTerms:
    """One device of `stage` over the step on the roofline before the efficiency: the FLOPs at
    peak, the bytes at the memory's bandwidth, and the kernels' launch floor (full
    recomputation runs each forward twice: its weights are read once more and its kernels
    launched again); and, apart, attention as written's passes over its scores at the
    memory's bandwidth (`ModelCard.score_traffic_bytes`), which leave the bytes' term."""
    recompute = plan.checkpointing == FULL
    shard = device_parameters(card, plan, split, stage)
    if split.rows:  # the count's bytes, each layer's share of them on one device
        moved = _counted_bytes(card, plan, split, stage)
        kernels = math.fsum(row.kernels for row in split.rows[stage]) * plan.micro_batches
    else:
        kept = stage_kept(card, plan, split, stage, "none") - _kept_scores(card, plan, split, stage)
        per_micro_batch = card.moved_bytes(shard, kept, plan.micro_batch_size / plan.context)
        if recompute:
            per_micro_batch += shard * card.state.params
        moved = per_micro_batch * plan.micro_batches + card.update_bytes(plan)
        kernels = card.kernels_per_block * split.blocks[stage] * plan.micro_batches
    bandwidth = cluster.device.memory_bandwidth_bytes_s
    return ComputeTerms(
        flops=flops_s,
        memory_bandwidth=moved / bandwidth,
        launches=kernels * (4 / 3 if recompute else 1.0) * LAUNCH_S,
        attention_scores=_score_traffic(card, plan, split, stage) / bandwidth,
    )


def _kept_scores(card: ModelCard, plan: Plan, split: StageSplit, stage: int) -> float:
    """The scores a Transformer stage's device would keep of a sample as written, recomputed or
    not: their writing and reading are in its scores' passes (`_score_traffic`), not in its
    kept bytes'."""
    if plan.attention == FLASH or split.rows:
        return 0.0
    return card.score_bytes * split.blocks[stage] / plan.tensor


def _score_traffic(card: ModelCard, plan: Plan, split: StageSplit, stage: int) -> float:
    """Bytes attention as written moves over its scores on one device of `stage` over the step:
    each block's (`ModelCard.score_traffic_bytes`), its heads split by tensor and its queries
    by context, for every sample of the step; 0 under a fused kernel or for a card of rows."""
    if plan.attention == FLASH or split.rows or not card.has_attention:
        return 0.0
    per_sample = card.score_traffic_bytes(plan.checkpointing) / (plan.tensor * plan.context)
    return per_sample * split.blocks[stage] * plan.micro_batch_size * plan.micro_batches


def _counted_bytes(card: ModelCard, plan: Plan, split: StageSplit, stage: int) -> float:
    """A card of rows' bytes over the step on one device of `stage`: each layer's share of the
    count's bytes a sample at the training's activation width (`roofline.ACTIVATION_WIDTH`),
    kept on the device as its weights are, and the update's, in the stage's share of the
    FLOPs."""
    width = ACTIVATION_WIDTH[training_precision(card.precision).peak]
    per_sample = rows_on_device(card, plan, split, stage, lambda row: row.moved_bytes)
    samples = plan.micro_batch_size * plan.micro_batches
    share = stage_work(card, plan, split, stage) / card.flops_per_sample
    return width * per_sample * samples + card.step_bytes * share


def _tensor_comm_s(
    card: ModelCard, plan: Plan, link: Interconnect | None, split: StageSplit, stage: int
) -> float:
    """The tensor axis's all-reduces of activations on `stage` (`stage_split.stage_messages`:
    a Transformer block's four, two forward and two backward), for every micro-batch.
    Sequence parallelism turns each into a reduce-scatter and an all-gather: the same bytes
    on the same link. Full recomputation runs the forward again in the backward, its two
    collectives with it (Megatron-LM's); selective recomputes the attention core alone, which
    has none."""
    if link is None:
        return 0.0
    batch = plan.micro_batch_size / plan.context
    per_micro_batch = math.fsum(
        count * ring_all_reduce_s(message * batch, plan.tensor, link)
        for message, count in stage_messages(card, plan, split, stage)
    )
    forward_again = FULL_RECOMPUTED_COLLECTIVES if plan.checkpointing == FULL else 1.0
    return per_micro_batch * plan.micro_batches * forward_again


def _context_link(cluster: GPUCluster, plan: Plan) -> Interconnect | None:
    """The link a context ring crosses: its ranks sit next to the tensor group's (Megatron-LM
    orders tensor, context, data), so inside a node while tensor × context fits one."""
    if plan.context == 1:
        return None
    return cluster.inside if plan.tensor * plan.context <= cluster.per_node else cluster.between


def _context_ring(card: ModelCard, plan: Plan, link: Interconnect | None) -> tuple[float, float]:
    """A context ring's sends and the attention FLOPs they run beside, per block and
    micro-batch on one device (Liu et al.'s ring attention, as Megatron-LM runs it): c−1
    sends of a chunk's K and V forward and twice that backward (K and V, then their
    gradients), each overlapped with a chunk's attention; what the compute does not hide is
    the step's `comm:context`. (0, 0) without a ring."""
    if link is None:
        return 0.0, 0.0
    chunk = plan.micro_batch_size * card.sequence / plan.context
    width = card.state.activation * card.hidden / card.heads
    kv = 2 * chunk * width * card.key_value_heads / card.key_value_split(plan.tensor)
    ring = 3 * (plan.context - 1) * link.send_s(kv)
    attention = 3 * card.attention_core_flops * plan.micro_batch_size / plan.tensor
    return ring, attention / plan.context


def _data_comm_s(
    card: ModelCard, plan: Plan, link: Interconnect | None, shard: float, expert: int = 1
) -> float:
    """The gradients' all-reduce (or reduce-scatter and all-gather, the same bytes) over the
    data and context axes (over their replicas ÷ `expert` for weights an expert axis divides),
    and fsdp's gathers on top: 1.5 times the bytes."""
    if link is None:
        return 0.0
    grads = shard * card.state.grads
    factor = 1.5 if plan.sharding == "fsdp" else 1.0
    return factor * ring_all_reduce_s(grads, plan.data * plan.context // expert, link)


def _expert_comm_s(card: ModelCard, plan: Plan, cluster: GPUCluster, blocks: int) -> float:
    """Each block's four all-to-alls per micro-batch (its tokens to their top-k experts and
    back, forward and backward alike), for the stage's blocks and every micro-batch: of a
    device's s·h·top-k values, (e−1)/e leave it, in e−1 messages. An expert group's ranks sit
    next to the tensor and context groups' (Megatron-Core orders tensor, context, expert,
    data), so it stays inside a node while tensor × context × expert fits one; a group over
    several nodes sends over the network only what is bound for the other nodes' ranks, and
    the rest over the node's own links at the same time."""
    if plan.expert == 1:
        return 0.0
    routed = card.routed_bytes * plan.micro_batch_size / (plan.tensor * plan.context)
    local = min(plan.expert, max(1, cluster.per_node // (plan.tensor * plan.context)))
    one = _all_to_all_s(routed * (local - 1) / plan.expert, local - 1, cluster.inside)
    if local < plan.expert:
        away = plan.expert - local
        one = max(one, _all_to_all_s(routed * away / plan.expert, away, cluster.between))
    return 4 * one * blocks * plan.micro_batches


def _all_to_all_s(leaving: float, messages: int, link: Interconnect) -> float:
    """`leaving` bytes sent over `link` in `messages` messages."""
    if messages == 0:
        return 0.0
    return link.latency_s * messages + leaving / link.bandwidth_bytes_s


def _stage_sends_s(
    card: ModelCard, plan: Plan, link: Interconnect | None, split: StageSplit
) -> float:
    """The sends a pipeline cannot hide: the fill and the drain, one activation and one gradient
    message across each of the K−1 cuts."""
    if link is None:
        return 0.0
    message = cut_bytes(card, plan, split) * plan.micro_batch_size / plan.context
    return 2 * (plan.stages - 1) * link.send_s(message)
