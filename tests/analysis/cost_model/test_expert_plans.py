"""The plan search's expert axis on a Mixtral-shaped card: what it divides, what its
all-to-alls move, where it is offered, and that dense cards are planned as before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster
from gpu_parallel_kit.analysis.cost_model.model_card import ModelCard, model_card
from gpu_parallel_kit.analysis.cost_model.parallel_plan import Plan, plans
from gpu_parallel_kit.analysis.cost_model.parallel_plan_memory import memory
from gpu_parallel_kit.analysis.cost_model.parallel_plan_step_time import stage_flops, step_time
from gpu_parallel_kit.errors import GpkError

S, H, A, L, F, E, K = 4096, 4096, 32, 32, 14336, 8, 2
EXPERT_WEIGHTS = L * E * 3 * H * F  # every block's (E, h, f), (E, h, f) and (E, f, h) kernels
ATTENTION_WEIGHTS = L * (2 * H * H + 2 * H * H // 4)  # Q, O and grouped K, V
PARAMETERS = EXPERT_WEIGHTS + ATTENTION_WEIGHTS + L * H * E


def mixtral_card(**changed) -> ModelCard:
    card = ModelCard(
        parameters=PARAMETERS,
        layers=L,
        hidden=H,
        heads=A,
        sequence=S,
        flops_per_sample=6 * S * (PARAMETERS - EXPERT_WEIGHTS * (1 - K / E)),
        activation_bytes=34 * S * H,
        kv_heads=8,
        experts=E,
        top_k=K,
        expert_parameters=EXPERT_WEIGHTS,
    )
    return replace(card, **changed)


def plan(**changed) -> Plan:
    shape = dict(
        data=8, tensor=1, stages=1, sharding="none", micro_batch_size=1, micro_batches=2,
        schedule="-", virtual_stages=1, checkpointing="full", attention="flash",
    )  # fmt: skip
    return Plan(**{**shape, **changed})


def test_a_dense_banks_count_is_scaled_to_its_routed_experts():
    # What the count of a dense bank gives: every expert on every token, 6 FLOPs a weight.
    dense = 6.0 * S * PARAMETERS
    count = {
        "flops": dense,
        "parameters": PARAMETERS,
        "kept_bytes": 0.0,
        "structure": {"blocks": L, "hidden": H, "heads": A},
        "experts": {"experts": E, "top_k": K, "expert_parameters": EXPERT_WEIGHTS},
    }
    card = model_card(count, "bf16", "adam", "mixtral", sequence=S)
    assert (card.experts, card.top_k) == (E, K)
    assert card.flops_per_sample == pytest.approx(6.0 * S * card.active_parameters)
    skipped = dense - card.flops_per_sample
    assert skipped == pytest.approx(6.0 * S * EXPERT_WEIGHTS * (1 - K / E))


def test_a_dense_bank_keeps_what_a_dispatched_one_keeps_at_its_capacitys_share():
    """Everything a dense bank keeps is per expert and token: dispatched, its capacity's
    c·k ÷ E of it. The count names each layer's kept bytes and the expert reader the banks'
    layers; a count without them takes off the stacked outputs alone."""
    bank, other = 4.0e9 * L, 1.0e9 * L  # per sample, all blocks
    count = {
        "flops": 6.0 * S * PARAMETERS,
        "parameters": PARAMETERS,
        "kept_bytes": bank + other,
        "structure": {"blocks": L, "hidden": H, "heads": A},
        "kept_by_path": {
            "mixtral/transformer_layer/moe_block/experts": bank * 0.75,
            "mixtral/transformer_layer/moe_block/experts/einsum": bank * 0.25,
            "mixtral/transformer_layer/self_attention": other,
        },
        "experts": {
            "experts": E,
            "top_k": K,
            "expert_parameters": EXPERT_WEIGHTS,
            "expert_outputs": L * (2 * F + H),
            "bank_paths": ["transformer_layer/moe_block/experts"],
        },
    }
    card = model_card(count, "bf16", "adam", "mixtral", sequence=S)
    capacity = 1.25 * K / E
    assert card.activation_bytes == pytest.approx((other + bank * capacity) / L)
    older = {**count, "kept_by_path": None}  # counted before layers' kept bytes were named
    outputs_only = model_card(older, "bf16", "adam", "mixtral", sequence=S)
    assert outputs_only.activation_bytes == pytest.approx(
        (bank + other) / L - 2 * S * (2 * F + H) * (E - 1.25 * K)
    )


def test_a_count_without_experts_keeps_its_flops():
    count = {"flops": 1e12, "parameters": 1e6, "structure": {"blocks": 2, "hidden": 8, "heads": 2}}
    card = model_card(count, "bf16", "adam", "gpt", sequence=16)
    assert (card.flops_per_sample, card.has_experts) == (1e12, False)


def test_the_expert_axis_divides_the_expert_weights_alone():
    card = mixtral_card()
    whole, split = memory(card, plan()), memory(card, plan(expert=4))
    held = EXPERT_WEIGHTS * (1 - 1 / 4)  # the experts three of four devices no longer keep
    assert whole.params - split.params == pytest.approx(2 * held)
    assert whole.grads - split.grads == pytest.approx(2 * held)
    assert whole.optimizer - split.optimizer == pytest.approx(12 * held)
    assert split.activations == whole.activations
    # The other weights are what they were: a card without experts loses nothing.
    dense = mixtral_card(experts=0, top_k=0, expert_parameters=0.0)
    assert memory(dense, plan(expert=4)) == memory(dense, plan())


def test_zero_shards_the_experts_over_the_replicas_that_hold_them():
    card = mixtral_card()
    sharded = memory(card, plan(expert=4, sharding="zero-1"))
    dense_part = (PARAMETERS - EXPERT_WEIGHTS) * 12 / 8  # over all 8 replicas
    expert_part = EXPERT_WEIGHTS / 4 * 12 / 2  # a quarter of them, over 8 ÷ 4 replicas
    assert sharded.optimizer == pytest.approx(dense_part + expert_part)


def test_the_all_to_alls_move_tokens_times_width_times_top_k_four_times():
    link = {"name": "test", "bandwidth_gb_s": 100.0, "latency_us": 0.0}
    cluster = GPUCluster("h100", nodes=1, per_node=8, inside=link, between=link)
    card = mixtral_card()
    used = plan(expert=8, micro_batch_size=2, micro_batches=3)
    seconds = step_time(card, used, cluster).parts.expert
    per_block = 2 * 2 * S * H * K * (8 - 1) / 8  # bf16 values of 2 samples, 7/8 leave
    assert seconds == pytest.approx(4 * per_block * L * 3 / 100e9)
    assert step_time(card, plan(), cluster).parts.expert == 0.0


def test_the_expert_group_crosses_nodes_only_when_it_must():
    fast = {"name": "fast", "bandwidth_gb_s": 400.0, "latency_us": 0.0}
    slow = {"name": "slow", "bandwidth_gb_s": 50.0, "latency_us": 0.0}
    cluster = GPUCluster("h100", nodes=2, per_node=8, inside=fast, between=slow)
    card = mixtral_card()
    inside = step_time(card, plan(data=8, tensor=2, expert=4), cluster).parts.expert
    across = step_time(card, plan(data=4, tensor=4, expert=4), cluster).parts.expert
    # tensor 4 × expert 4 spans two nodes: half the bytes a device, and of those only the
    # two quarters bound for the other node's expert ranks cross the slower network (the
    # quarter for the rank beside it goes over NVLink at the same time):
    # (1/2 · 2/4 / 50) / (3/4 / 400) = 8/3
    assert across / inside == pytest.approx(8 / 3)
    # the two parts go at the same time: the longer one counts, even on equal links
    level = GPUCluster("h100", nodes=2, per_node=8, inside=slow, between=slow)
    assert step_time(card, plan(data=4, tensor=4, expert=4), level).parts.expert == across


def test_the_busiest_expert_bounds_the_compute():
    card = mixtral_card(capacity_factor=1.5)
    even = stage_flops(card, plan(checkpointing="none"))[0]
    routed = stage_flops(card, plan(checkpointing="none", expert=8))[0]
    # half again the routed experts' work, on every block: the busiest expert's tokens
    assert routed - even == pytest.approx(L * 6 * S * EXPERT_WEIGHTS / L * K / E * 0.5)


def test_the_expert_axis_is_offered_where_it_divides_the_experts_and_the_replicas():
    cluster = GPUCluster("h100", nodes=2, per_node=8)
    six = mixtral_card(experts=6, expert_parameters=EXPERT_WEIGHTS * 6 / 8)
    offered = {(p.data, p.expert) for p in plans(six, cluster, 64)}
    assert {e for _, e in offered} == {1, 2}  # 3 and 6 divide no power-of-two data axis
    assert all(data % expert == 0 for data, expert in offered)
    eight = {p.expert for p in plans(mixtral_card(), cluster, 64)}
    assert eight == {1, 2, 4, 8}


def test_a_dense_card_gets_no_expert_axis():
    cluster = GPUCluster("h100", nodes=1, per_node=8)
    dense = mixtral_card(experts=0, top_k=0, expert_parameters=0.0)
    assert {p.expert for p in plans(dense, cluster, 16)} == {1}


def test_a_top_k_beyond_the_experts_is_one_sentence():
    with pytest.raises(GpkError, match="top_k=9 is not between 1 and the 8 experts"):
        mixtral_card(top_k=9)
