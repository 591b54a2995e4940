"""A parallel training plan of a model, and every plan of it on a GPU cluster.

A plan splits the cluster's GPUs into data × tensor × pipeline axes and says how the model states
are sharded over the data axis (none, ZeRO's zero-1 and zero-2, or fsdp), how a replica's batch
is cut into micro-batches, which schedule runs the pipeline and whether the blocks are
recomputed. A mixture of experts' plans add an expert axis inside the data axis: each expert
group of the data replicas holds experts ÷ expert of every block's experts (Megatron-Core's
expert parallelism). Its memory is `parallel_plan_memory.py`'s, its step
`parallel_plan_step_time.py`'s.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from ...errors import GpkError, whole_number
from ...pipeline.schedules import INTERLEAVED, ONE_F_ONE_B, ZB_H1
from .model_card import AS_WRITTEN, ATTENTIONS, FLASH, SELECTIVE
from .stage_split import stage_split

if TYPE_CHECKING:
    from .gpu_cluster import GPUCluster
    from .model_card import ModelCard

SHARDINGS = ("none", "zero-1", "zero-2", "fsdp")
NONE, FULL = "none", "full"
CHECKPOINTING = (NONE, SELECTIVE, FULL)
LONG_SEQUENCE = 8192  # tokens a sample from which a context axis is offered
MOST_CONTEXT = 16  # the largest context axis offered
PIPELINE_SCHEDULES = (ONE_F_ONE_B.name, INTERLEAVED.name, ZB_H1.name)
NO_PIPELINE = "-"  # the schedule of a plan with one stage: gradient accumulation
VIRTUAL_STAGES = 2  # interleaved's chunks per device, as Megatron-LM's runs mostly used


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
    attention: str = AS_WRITTEN  # "flash": a fused kernel keeps no scores; or "as-written"
    sequence_parallel: bool = False  # layer norms and dropouts split by tensor (Korthikanti)
    context: int = 1  # each sample's tokens split over a ring passing K and V (ring attention)
    stage_blocks: tuple[int, ...] = ()  # blocks per stage; (): balanced by counted time
    expert: int = 1  # data replicas sharing a block's experts, each holding experts ÷ expert


def plans(
    card: ModelCard, cluster: GPUCluster, global_batch: int, attention: str | None = None
) -> Iterator[Plan]:
    """Every plan of `card` on all of `cluster`'s GPUs at `global_batch` samples a step.

    Stages need not divide the blocks (`stage_split.py` balances them; a card of rows is cut
    between its layers); a tensor axis is offered where it splits the model
    (`ModelCard.tensor_splits`); sequence parallelism is offered with a tensor axis on a
    Transformer, selective checkpointing where attention keeps its scores,
    and a context axis where a sample has `LONG_SEQUENCE` tokens or more; a mixture of experts
    gets an expert axis of each size that divides both its experts and the data axis.

    Args:
        card: the model's counted figures.
        cluster: the GPUs every plan uses, all of them.
        global_batch: samples per step, over the whole cluster.
        attention: "flash" or "as-written" for every plan; None: "flash" where the cluster's
            GPU runs a fused attention kernel.
    """
    whole_number(global_batch, "global_batch")
    attention = attention_of(cluster, attention) if card.has_attention else AS_WRITTEN
    gpus = cluster.gpus
    for tensor, stages in itertools.product(_divisors(gpus), repeat=2):
        if gpus % (tensor * stages) or not card.tensor_splits(tensor):
            continue
        if stages > card.layers:
            continue
        for context in _contexts(card, gpus // (tensor * stages)):
            data = gpus // (tensor * stages * context)
            if global_batch % data:
                continue
            replica = global_batch // data
            shapes = itertools.product(
                _expert_axes(card, data),
                (s for s in _divisors(replica) if s & (s - 1) == 0),
            )
            for expert, size in shapes:
                micro_batches = replica // size
                for schedule in _schedules(card, stages, micro_batches):
                    even = schedule.chunks > 1
                    blocks = stage_split(card, stages, even).blocks if stages > 1 else ()
                    for sharding in SHARDINGS if stages == 1 else SHARDINGS[:2]:
                        for checkpointing in _checkpointings(card, attention):
                            for split_norms in _sequence_parallel(card, tensor):
                                yield Plan(
                                    data=data,
                                    tensor=tensor,
                                    stages=stages,
                                    sharding=sharding,
                                    micro_batch_size=size,
                                    micro_batches=micro_batches,
                                    schedule=schedule.name,
                                    virtual_stages=schedule.chunks,
                                    checkpointing=checkpointing,
                                    attention=attention,
                                    sequence_parallel=split_norms,
                                    context=context,
                                    stage_blocks=blocks,
                                    expert=expert,
                                )


def attention_of(cluster: GPUCluster, attention: str | None = None) -> str:
    """The attention plans run: the caller's, else "flash" where the cluster's GPU has a fused
    kernel and "as-written" elsewhere; an unknown name is one sentence."""
    if attention is None:
        return FLASH if cluster.device.fused_attention else AS_WRITTEN
    if attention not in ATTENTIONS:
        known = " or ".join(repr(a) for a in ATTENTIONS)
        raise GpkError(f"attention={attention!r} is not known; use {known}")
    return attention


def _checkpointings(card: ModelCard, attention: str) -> tuple[str, ...]:
    # A fused attention keeps no scores: selective checkpointing would recompute nothing more.
    # A card of rows has no blocks whose inputs full checkpointing would keep alone.
    if card.rows:
        return (NONE,)
    return CHECKPOINTING if attention == AS_WRITTEN else (NONE, FULL)


def _sequence_parallel(card: ModelCard, tensor: int) -> tuple[bool, ...]:
    # Layer norms and dropouts split over the sequence: a Transformer's, with a tensor axis.
    return (False, True) if tensor > 1 and card.has_attention else (False,)


def _contexts(card: ModelCard, rest: int) -> Iterator[int]:
    """Context sizes for a sample's tokens: 1, and where the sequence is long, the powers of
    two up to `MOST_CONTEXT` that divide the GPUs left and split the tokens into 2·c chunks
    (Megatron-LM's causal load balance)."""
    yield 1
    if card.sequence < LONG_SEQUENCE:
        return
    context = 2
    while context <= min(rest, MOST_CONTEXT):
        if rest % context == 0 and card.sequence % (2 * context) == 0:
            yield context
        context *= 2


def _expert_axes(card: ModelCard, data: int) -> tuple[int, ...]:
    """Expert axes for `data` replicas: 1, and for a mixture of experts every size above 1
    that divides both its experts and the replicas."""
    if not card.has_experts:
        return (1,)
    return (1, *(e for e in _divisors(card.experts)[1:] if data % e == 0))


class _Schedule(NamedTuple):
    name: str
    chunks: int  # model chunks per device


@functools.lru_cache(maxsize=256)
def _divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def _schedules(card: ModelCard, stages: int, micro_batches: int) -> Iterator[_Schedule]:
    if stages == 1:
        yield _Schedule(NO_PIPELINE, 1)
        return
    yield _Schedule(ONE_F_ONE_B.name, 1)
    yield _Schedule(ZB_H1.name, 1)
    if card.layers % (stages * VIRTUAL_STAGES) == 0 and micro_batches % stages == 0:
        yield _Schedule(INTERLEAVED.name, VIRTUAL_STAGES)
