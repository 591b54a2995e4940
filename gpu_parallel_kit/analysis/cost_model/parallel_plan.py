"""A parallel training plan of a Transformer, and every plan of a model on a GPU cluster.

A plan splits the cluster's GPUs into data × tensor × pipeline axes and says how the model states
are sharded over the data axis (none, ZeRO's zero-1 and zero-2, or fsdp), how a replica's batch
is cut into micro-batches, which schedule runs the pipeline and whether the blocks are
recomputed. Its memory is `parallel_plan_memory.py`'s, its step `parallel_plan_step_time.py`'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from ...errors import whole_number
from ...pipeline.schedules import INTERLEAVED, ONE_F_ONE_B, ZB_H1

if TYPE_CHECKING:
    from .gpu_cluster import GPUCluster
    from .model_card import ModelCard

SHARDINGS = ("none", "zero-1", "zero-2", "fsdp")
CHECKPOINTING = ("none", "full")
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
            for schedule in _schedules(card, stages, micro_batches):
                for sharding in SHARDINGS if stages == 1 else SHARDINGS[:2]:
                    for checkpointing in CHECKPOINTING:
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
                        )


class _Schedule(NamedTuple):
    name: str
    chunks: int  # model chunks per device


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _schedules(card: ModelCard, stages: int, micro_batches: int) -> Iterator[_Schedule]:
    if stages == 1:
        yield _Schedule(NO_PIPELINE, 1)
        return
    yield _Schedule(ONE_F_ONE_B.name, 1)
    yield _Schedule(ZB_H1.name, 1)
    if card.layers % (stages * VIRTUAL_STAGES) == 0 and micro_batches % stages == 0:
        yield _Schedule(INTERLEAVED.name, VIRTUAL_STAGES)
