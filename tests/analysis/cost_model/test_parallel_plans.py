"""Plans of a Transformer on a two-level cluster: valid, sized by ZeRO and Korthikanti, ranked."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster
from gpu_parallel_kit.analysis.cost_model.model_card import ModelCard
from gpu_parallel_kit.analysis.cost_model.parallel_plan import Plan, plans
from gpu_parallel_kit.analysis.cost_model.parallel_plan_memory import memory
from gpu_parallel_kit.analysis.cost_model.parallel_plan_ranking import rank
from gpu_parallel_kit.analysis.cost_model.parallel_plan_step_time import step_time
from gpu_parallel_kit.errors import GpkError

S, H, A, L = 2048, 4096, 32, 32  # a 6.7 B-parameter GPT, per block 12·h² parameters
CARD = ModelCard(
    parameters=12 * H * H * L,
    layers=L,
    hidden=H,
    heads=A,
    sequence=S,
    flops_per_sample=72 * S * L * H * H * (1 + S / (6 * H)) / 1,  # Megatron's, per sample
    activation_bytes=S * H * 34 + 5 * A * S * S,  # Korthikanti's, per block and sample
)


@pytest.fixture
def cluster():
    return GPUCluster("a100", nodes=4, per_node=8, between="net200g")


def plan(**fields):
    base = dict(data=1, tensor=1, stages=1, sharding="none", micro_batch_size=1,
                micro_batches=1, schedule="-", virtual_stages=1, checkpointing="none")  # fmt: skip
    return Plan(**{**base, **fields})


def test_every_plan_uses_every_gpu_and_divides_the_model(cluster):
    found = list(plans(CARD, cluster, global_batch=256))
    assert len(found) > 100
    for p in found:
        assert p.data * p.tensor * p.stages == cluster.gpus
        assert A % p.tensor == 0 and L % p.stages == 0
        assert p.data * p.micro_batch_size * p.micro_batches == 256
        if p.sharding in ("zero-2", "fsdp"):
            assert p.stages == 1  # as DeepSpeed allows
        if p.schedule == "interleaved":
            assert p.micro_batches % p.stages == 0 and L % (p.stages * p.virtual_stages) == 0
        assert (p.schedule == "-") == (p.stages == 1)
    assert {p.sharding for p in found} == {"none", "zero-1", "zero-2", "fsdp"}
    assert {p.schedule for p in found} == {"-", "1f1b", "interleaved", "zb-h1"}


def test_model_state_follows_zero():
    psi = CARD.parameters / 4  # tensor 2 × stages 2
    for sharding, per_parameter in (
        ("none", 16), ("zero-1", 4 + 12 / 8), ("zero-2", 2 + 14 / 8), ("fsdp", 16 / 8),
    ):  # fmt: skip
        stages = 1 if sharding in ("zero-2", "fsdp") else 2
        tensor = 4 if stages == 1 else 2
        parts = memory(CARD, plan(data=8, tensor=tensor, stages=stages, sharding=sharding))
        state = parts.params + parts.grads + parts.optimizer
        assert state == pytest.approx(per_parameter * psi), sharding


def test_activations_follow_korthikanti_and_the_schedule():
    one = memory(CARD, plan(tensor=1)).activations
    assert one == pytest.approx(L * (S * H * 34 + 5 * A * S * S))
    # The tensor-parallel form: s·b·h·(10 + 24/t + 5·a·s/(h·t)) per block.
    t = 8
    split = memory(CARD, plan(tensor=t)).activations
    assert split == pytest.approx(L * S * H * (10 + 24 / t + 5 * A * S / (H * t)))
    # 1F1B: the first of K stages holds K micro-batches of its L/K blocks.
    piped = memory(CARD, plan(stages=4, micro_batches=16, schedule="1f1b")).activations
    assert piped == pytest.approx(one / 4 * 4)
    full = memory(CARD, plan(checkpointing="full")).activations
    assert full == pytest.approx(L * 2 * S * H + one / L)  # inputs, and one block rebuilt


def test_a_tensor_group_across_nodes_waits_on_the_network(cluster):
    wide = plan(data=2, tensor=16, micro_batches=4)
    across = step_time(CARD, wide, cluster).parts.tensor
    big_nodes = GPUCluster("a100", nodes=2, per_node=16, inside="nvlink3", between="net200g")
    inside = step_time(CARD, wide, big_nodes).parts.tensor
    assert across > 5 * inside


def test_plans_that_fit_come_first_fastest_first(cluster):
    rows = rank(CARD, cluster, global_batch=256)
    fits = [r["fits"] for r in rows]
    assert fits == sorted(fits, reverse=True) and any(fits) and not all(fits)
    fitting = [r for r in rows if r["fits"]]
    assert [r["step_time_s"] for r in fitting] == sorted(r["step_time_s"] for r in fitting)
    best = fitting[0]
    assert best["memory_bytes"] <= 0.9 * 80e9
    assert best["step_time_low_s"] <= best["step_time_s"] <= best["step_time_high_s"]
    # no step reaches more of the peak than its stack's largest matmuls do
    assert 0 < best["mfu"] < cluster.stack.matmul.peak_share and best["bound"] in (
        "compute", "memory-bandwidth", "launches", "comm:tensor", "comm:data", "comm:stages",
        "bubble",
    )  # fmt: skip
    # A replica of 6.7 B parameters with Adam (107 GB) fits no 80 GB A100.
    assert not any(r["fits"] for r in rows if r["tensor"] * r["stages"] == 1 and
                   r["sharding"] == "none")  # fmt: skip


def _gpt(hidden, heads, layers, sequence):
    """Megatron's GPT card of a width, heads, blocks and sequence."""
    return ModelCard(
        parameters=12 * hidden**2 * layers, layers=layers, hidden=hidden, heads=heads,
        sequence=sequence, flops_per_sample=72 * sequence * layers * hidden**2,
        activation_bytes=sequence * hidden * 34 + 5 * heads * sequence**2,
    )  # fmt: skip


def test_the_compute_part_is_the_largest_of_flops_bytes_and_launches(cluster):
    for attention in ("flash", "as-written"):
        for row in rank(CARD, cluster, global_batch=256, attention=attention)[:50]:
            terms = [row["flops_s"], row["memory-bandwidth_s"], row["launches_s"]]
            scores = row["attention-scores_s"]  # as written, its scores' passes on top
            assert row["compute_s"] == pytest.approx(max(terms) + scores)
            assert (scores > 0) == (attention == "as-written")


def test_a_tiny_model_on_many_tensor_ways_waits_on_memory_or_launches():
    tiny, four = _gpt(64, 8, 4, 32), GPUCluster("a100", nodes=1, per_node=4)
    timed = step_time(tiny, plan(tensor=4, micro_batches=8), four)
    assert timed.bound in ("memory-bandwidth", "launches")
    assert timed.parts.compute > 10 * timed.terms.flops
    # Wide, short samples, one at a time: the weights read every micro-batch rule the compute.
    wide = step_time(_gpt(4096, 32, 4, 32), plan(tensor=4, micro_batches=8), four)
    assert wide.bound == "memory-bandwidth"
    assert wide.terms.memory_bandwidth > max(wide.terms.flops, wide.terms.launches)


def test_a_gpt3_plan_is_bound_by_its_flops_not_its_bytes_or_launches():
    gpt3 = _gpt(12288, 96, 96, 2048)
    nodes = GPUCluster("a100", nodes=128, per_node=8)
    used = plan(data=8, tensor=8, stages=16, micro_batches=192, schedule="1f1b")
    timed = step_time(gpt3, used, nodes)
    assert timed.terms.flops > 2 * max(timed.terms.memory_bandwidth, timed.terms.launches)
    assert timed.bound not in ("memory-bandwidth", "launches")


def test_the_bytes_moved_are_the_weights_thrice_the_gradients_once_and_activations_twice():
    shard = CARD.parameters / 8  # tensor 2 × stages 4
    kept = memory(CARD, plan(tensor=2, stages=4, micro_batches=4, schedule="1f1b"))
    blocks = kept.activations / 4  # of 4 in flight: one micro-batch's, the stage's
    none = CARD.moved_bytes(shard, blocks, micro_batch_size=0)
    state = CARD.state
    assert none == pytest.approx(shard * (3 * state.params + state.grads))
    one = CARD.moved_bytes(shard, blocks, micro_batch_size=1)
    assert one - none == pytest.approx(2 * blocks)
    with pytest.raises(GpkError, match="kernels_per_block=0"):
        dataclasses.replace(CARD, kernels_per_block=0)


def test_a_batch_no_plan_divides_is_one_sentence(cluster):
    odd = ModelCard(3e9, layers=3, hidden=3 * 1024, heads=3, sequence=1024,
                    flops_per_sample=1e13, activation_bytes=1e8)  # fmt: skip
    # Two stages may split its three blocks, but 36 divides neither 32 replicas nor 16.
    with pytest.raises(GpkError, match="global batch that is a multiple of 32"):
        rank(odd, cluster, global_batch=36)
