"""Every data × tensor × pipeline plan of a Transformer on a GPU cluster, its memory and its step.

Pure arithmetic on a `ModelCard` (a model's counted figures) and a `GPUCluster`. Memory follows
ZeRO (`training_precision.model_state_bytes`: mixed-precision Adam's 2 + 2 + 12 bytes per
parameter, fp32's 4 + 4 + 8, the optimizer's sharded by zero-1, the gradients too by zero-2,
everything by fsdp) and Korthikanti et al.'s activations; the step is
closed-form: compute on the roofline (`roofline.py`'s max(flops / peak, bytes / bandwidth) /
efficiency, floored by kernels · launch), each axis's collectives on the link `cluster.links()`
places them on, and the schedule's bubble. docs/planning.md gives the formulas and sources.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from ..analysis.cost_model.gpu_cluster import GPUCluster
from ..analysis.cost_model.hardware_presets import Interconnect
from ..analysis.cost_model.roofline import DEFAULT_EFFICIENCY, LAUNCH_S, Efficiency
from ..analysis.cost_model.step_time_model import ring_all_reduce_s
from ..analysis.cost_model.training_precision import (
    SHARDED_BY_DATA,
    StateBytes,
    model_state_bytes,
    state_bytes,
    training_precision,
)
from ..errors import GpkError, whole_number
from ..pipeline.schedules import INTERLEAVED, ONE_F_ONE_B, ZB_H1
from ..pipeline.simulation import theoretical_bubble

SHARDINGS = ("none", "zero-1", "zero-2", "fsdp")
CHECKPOINTING = ("none", "full")
PIPELINE_SCHEDULES = (ONE_F_ONE_B.name, INTERLEAVED.name, ZB_H1.name)
NO_PIPELINE = "-"  # the schedule of a plan with one stage: gradient accumulation
VIRTUAL_STAGES = 2  # interleaved's chunks per device, as Megatron-LM's runs mostly used
RESERVE = 0.1  # of a device's memory kept for the framework, buffers and fragmentation
# Kernels one Transformer block launches per micro-batch when the count does not say: Megatron-LM's
# fused forward is 12 (2 layer norms, the QKV, projection and two MLP matmuls, the two batched
# attention matmuls, the fused scale-mask-softmax, two bias-dropout-adds, the bias-GeLU), and the
# backward launches about twice as many (Shoeybi et al. 2019; Korthikanti et al. 2022).
KERNELS_PER_BLOCK = 36.0
# The compute part's three terms (`step_time`), and the bound each names when it rules.
COMPUTE_TERMS = {"flops": "compute", "memory-bandwidth": "memory-bandwidth", "launches": "launches"}
PARTS = ("compute", "comm:tensor", "comm:data", "comm:stages", "bubble")


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

    def moved_bytes(self, tensor: int, stages: int, micro_batch_size: int) -> float:
        """Bytes one device moves through its memory for one micro-batch of its stage: its shard
        of the weights read once in the forward and twice in the backward (the input's and the
        weights' gradients), its gradients written, and its blocks' kept activations written in
        the forward and read in the backward (Williams et al.'s roofline traffic, as
        `roofline.py` counts it; docs/planning.md)."""
        shard = self.parameters / (tensor * stages)
        weights = shard * (3 * self.state.params + self.state.grads)
        kept = _block_activations(self, tensor, "none") * self.layers / stages
        return weights + 2 * kept * micro_batch_size

    def update_bytes(self, plan: Plan) -> float:
        """Bytes the optimizer's update moves on one device once a step: the optimizer state of
        its slice read and written, that slice's gradients read and weights written."""
        shard = self.parameters / (plan.tensor * plan.stages)
        slice_ = shard / (plan.data if SHARDED_BY_DATA[plan.sharding][2] else 1)
        return slice_ * (2 * self.state.optimizer + self.state.grads + self.state.params)


@dataclass(frozen=True)
class Plan:
    """One way to train: the axes, the sharding, the micro-batches, the schedule."""

    data: int
    tensor: int
    stages: int
    sharding: str
    micro_batch_size: int
    micro_batches: int
    schedule: str
    virtual_stages: int
    checkpointing: str


def plans(card: ModelCard, cluster: GPUCluster, global_batch: int) -> Iterator[Plan]:
    """Every plan of `card` on all of `cluster`'s GPUs at `global_batch` samples a step."""
    whole_number(global_batch, "global_batch")
    gpus = cluster.gpus
    for tensor, stages in itertools.product(_divisors(gpus), repeat=2):
        if gpus % (tensor * stages) or card.heads % tensor or card.hidden % tensor:
            continue
        if card.layers % stages:
            continue
        data = gpus // (tensor * stages)
        if global_batch % data:
            continue
        replica = global_batch // data
        for size in (s for s in _divisors(replica) if s & (s - 1) == 0):
            micro_batches = replica // size
            for schedule, chunks in _schedules(card, stages, micro_batches):
                for sharding in SHARDINGS if stages == 1 else SHARDINGS[:2]:
                    for checkpointing in CHECKPOINTING:
                        yield Plan(
                            data, tensor, stages, sharding, size, micro_batches,
                            schedule, chunks, checkpointing,
                        )  # fmt: skip


def memory(card: ModelCard, plan: Plan) -> dict[str, float]:
    """Bytes on the fullest device, by part: its share of the parameters, gradients and Adam's
    state under the plan's sharding, and the activations of the micro-batches in flight."""
    states = model_state_bytes(
        card.parameters, card.state, plan.data, plan.tensor, plan.stages, plan.sharding
    )
    per_block = _block_activations(card, plan.tensor, plan.checkpointing)
    blocks = card.layers / plan.stages
    activations = per_block * blocks * plan.micro_batch_size * _in_flight(plan)
    if plan.checkpointing == "full":  # one block's activations rebuilt during its backward
        activations += _block_activations(card, plan.tensor, "none") * plan.micro_batch_size
    return {**states, "activations_bytes": activations}


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


def rank(
    card: ModelCard,
    cluster: GPUCluster,
    global_batch: int,
    reserve: float = RESERVE,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> list[dict[str, float | int | str | bool]]:
    """Every plan as a row (`Plan`'s fields, `memory`, `step_time`, `memory_bytes`, `fits`),
    those that fit first, each group fastest first (of two as fast, the leaner first)."""
    if not 0 <= reserve < 1:
        raise GpkError(f"reserve={reserve} must lie in [0, 1); e.g. 0.1 keeps a tenth free")
    room = cluster.device.memory_bytes * (1 - reserve)
    rows = []
    for plan in plans(card, cluster, global_batch):
        parts = memory(card, plan)
        total = sum(parts.values())
        row = {**asdict(plan), **step_time(card, plan, cluster, efficiency), **parts}
        rows.append({**row, "memory_bytes": total, "fits": total <= room})
    if not rows:
        raise GpkError(
            f"no data × tensor × stages plan divides {card.layers} blocks, {card.heads} heads "
            f"and a global batch of {global_batch} over {cluster.gpus} GPUs; use a global batch "
            f"that is a multiple of {cluster.gpus}"
        )
    rows.sort(key=lambda r: (not r["fits"], r["step_time_s"], r["memory_bytes"]))
    return rows


@functools.lru_cache(maxsize=4096)
def _links(cluster: GPUCluster, data: int, tensor: int, stages: int) -> dict:
    return cluster.links(data=data, tensor=tensor, stages=stages)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _schedules(card: ModelCard, stages: int, micro_batches: int) -> Iterator[tuple[str, int]]:
    if stages == 1:
        yield NO_PIPELINE, 1
        return
    yield ONE_F_ONE_B.name, 1
    yield ZB_H1.name, 1
    chunks = VIRTUAL_STAGES
    if card.layers % (stages * chunks) == 0 and micro_batches % stages == 0:
        yield INTERLEAVED.name, chunks


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


def _block_activations(card: ModelCard, tensor: int, checkpointing: str) -> float:
    """One block's kept bytes per sample on one of `tensor` devices (Korthikanti et al.: the
    scores divide by t, and of the rest's 34·s·h, 24 divide by t and 10 do not)."""
    if checkpointing == "full":
        return card.activation_send_bytes  # the block's input alone, 2·s·h at 16 bits
    rest = max(0.0, card.activation_bytes - card.score_bytes)
    return card.score_bytes / tensor + rest * (10 + 24 / tensor) / 34


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
