"""Stages that need not divide the blocks (`analysis/cost_model/stage_split.py`): the embedding
on the first, the head on the last, the blocks balanced by counted time."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster
from gpu_parallel_kit.analysis.cost_model.model_card import ModelCard
from gpu_parallel_kit.analysis.cost_model.parallel_plan import Plan
from gpu_parallel_kit.analysis.cost_model.parallel_plan_memory import memory
from gpu_parallel_kit.analysis.cost_model.parallel_plan_ranking import rank
from gpu_parallel_kit.analysis.cost_model.parallel_plan_step_time import stage_flops, step_time
from gpu_parallel_kit.analysis.cost_model.stage_split import blocks_text, split_of, stage_split
from gpu_parallel_kit.errors import GpkError

S, H, A, V = 2048, 4096, 32, 51200


def card(layers, vocabulary=V, **fields):
    """Megatron's GPT of `layers` blocks, its tied head's 6·s·h·V FLOPs counted."""
    block = 12 * H * H
    return ModelCard(
        parameters=block * layers + vocabulary * H, layers=layers, hidden=H, heads=A, sequence=S,
        flops_per_sample=72 * S * layers * H * H + 6 * S * H * vocabulary,
        activation_bytes=S * H * 34 + 5 * A * S * S, vocabulary=vocabulary, **fields,
    )  # fmt: skip


def test_a_head_that_weighs_a_block_takes_a_block_off_the_last_stage():
    # Seven blocks of 1 and a head of 1 over four stages: two units each.
    unit = card(7, block_flops=1.0, block_parameters=1.0)
    unit = dataclasses.replace(unit, flops_per_sample=8.0)
    assert stage_split(unit, 4).blocks == (2, 2, 2, 1)
    assert stage_split(unit, 4).flops == (2.0, 2.0, 2.0, 2.0)


def test_stages_that_divide_the_blocks_of_a_light_head_split_them_evenly():
    # A head of 6·s·h·V is V/12h of a block: 0.1 here, too light to move a block.
    assert stage_split(card(96, vocabulary=4915), 8).blocks == (12,) * 8
    assert stage_split(card(96, vocabulary=0), 8).blocks == (12,) * 8


def test_the_edges_hold_the_embedding_and_the_head():
    split = stage_split(card(32), 4)
    first, middle, last = (n * 12 * H * H for n in (split.blocks[0], 8, split.blocks[-1]))
    assert split.blocks[1] == 8 and sum(split.blocks) == 32
    assert split.parameters[0] == pytest.approx(first + V * H)  # the embedding
    assert split.parameters[-1] == pytest.approx(last + V * H)  # a copy of the tied head
    assert split.parameters[1] == pytest.approx(middle)
    head = split.flops[-1] - split.blocks[-1] * split.flops[1] / 8
    assert head == pytest.approx(6 * S * H * V)
    with pytest.raises(GpkError, match="do not give each stage a block"):
        split_of(card(32), (16, 15))


def test_a_94_block_model_gets_plans_of_4_8_and_16_stages_on_16_nodes_of_8():
    odd = card(94)
    rows = rank(odd, GPUCluster("h100", nodes=16, per_node=8), global_batch=512)
    for stages in (4, 8, 16):
        found = [r for r in rows if r["stages"] == stages and r["virtual_stages"] == 1]
        assert found, stages
        blocks = found[0]["stage_blocks"]
        assert sum(blocks) == 94 and len(blocks) == stages
        # balanced by counted time to within a block, the head's stage holding the fewest
        loads = stage_split(odd, stages).flops
        assert max(loads) - min(loads) <= 72 * S * H * H and blocks[-1] == min(blocks), blocks


def test_the_busiest_stage_times_the_step_and_the_fullest_sizes_it():
    odd = card(94)
    cluster = GPUCluster("h100", nodes=1, per_node=8)
    split = stage_split(odd, 8)
    uneven = Plan(data=1, tensor=1, stages=8, sharding="none", micro_batch_size=1,
                  micro_batches=16, schedule="1f1b", virtual_stages=1, checkpointing="full",
                  stage_blocks=split.blocks)  # fmt: skip
    loads = stage_flops(odd, uneven)
    busiest = max(loads.values())
    assert len(loads) == 8 and busiest == pytest.approx(max(split.flops) * 4 / 3, rel=0.01)
    # Moving two blocks to the first stage makes it the busiest and the fullest.
    heavy = (split.blocks[0] + 2, split.blocks[1] - 1, split.blocks[2] - 1, *split.blocks[3:])
    lopsided = dataclasses.replace(uneven, stage_blocks=heavy)
    assert step_time(odd, lopsided, cluster).likely > step_time(odd, uneven, cluster).likely
    assert memory(odd, lopsided).total > memory(odd, uneven).total


def test_a_long_middle_is_elided_in_the_blocks_text():
    assert blocks_text((7, 8, 8, 8, 8, 8, 8, 7)) == "7-8-…-8-7"
    assert blocks_text((20, 20, 20, 20)) == "20-20-20-20"
