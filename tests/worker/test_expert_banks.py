"""The plan search's reading of a mixture of experts (`worker/expert_banks.py`) and the card it
makes, on one block of each keras-hub 0.32 MoE family as `read_weights` reads it off the built
model (4 experts, top 2, width 32): the routed experts, their biases and scales with them,
counted by top-k ÷ experts, and everything else (routers, shared experts) as always active."""

from __future__ import annotations

import math

import pytest

from gpu_parallel_kit.analysis.cost_model.model_card import model_card
from gpu_parallel_kit.sharding.experts import find_banks
from gpu_parallel_kit.sharding.layout import LayerInfo, VariableInfo
from gpu_parallel_kit.worker.expert_banks import expert_figures

E, K, W, BLOCKS = 4, 2, 32, 2
ATTENTION = [
    ("self_attention/query/kernel", (W, 4, 8)),
    ("self_attention/attention_output/kernel", (4, 8, W)),  # as many heads as experts
]
MIXTRAL, QWEN = "mixtral_sparse_moe_block/", "qwen_sparse_moe_block/"
# Each family's block: (its name, its weights as (role, shape, routed)).
FAMILIES = {
    "mixtral": ("transformer_layer", [
        *((role, shape, False) for role, shape in ATTENTION),
        (MIXTRAL + "sparse_feedforward_gate_dense/kernel", (W, E), False),
        (MIXTRAL + "experts/expert_feedforward_gate_dense", (E, W, 64), True),
        (MIXTRAL + "experts/expert_feedforward_intermediate_dense", (E, W, 64), True),
        (MIXTRAL + "experts/expert_feedforward_output_dense", (E, 64, W), True),
    ]),
    "qwen_moe": ("transformer_layer", [
        *((role, shape, False) for role, shape in ATTENTION),
        (QWEN + "sparse_feedforward_gate_dense/kernel", (W, E), False),
        (QWEN + "experts/expert_feedforward_gate_dense", (E, W, 96), True),
        (QWEN + "experts/expert_feedforward_output_dense", (E, 48, W), True),
        (QWEN + "shared_expert_dense/feedforward_intermediate_dense/kernel", (W, 40), False),
        (QWEN + "shared_expert_dense/feedforward_gate_dense/kernel", (W, 40), False),
        (QWEN + "shared_expert_dense/feedforward_output_dense/kernel", (40, W), False),
        (QWEN + "shared_expert_gate_dense/kernel", (W, 1), False),
    ]),
    "qwen3_moe": ("transformer_layer", [
        *((role, shape, False) for role, shape in ATTENTION),
        ("qwen3_sparse_moe_block/sparse_feedforward_gate_dense/kernel", (W, E), False),
        ("qwen3_sparse_moe_block/experts/expert_feedforward_gate_dense", (E, W, 96), True),
        ("qwen3_sparse_moe_block/experts/expert_feedforward_output_dense", (E, 48, W), True),
    ]),
    "qwen3_5_moe": ("transformer_layer", [
        *((role, shape, False) for role, shape in ATTENTION),
        ("sparse_moe_block/router_gate/kernel", (W, E), False),
        ("sparse_moe_block/experts/expert_feedforward_gate_dense", (E, W, 96), True),
        ("sparse_moe_block/experts/expert_feedforward_output_dense", (E, 48, W), True),
        ("sparse_moe_block/shared_expert/feedforward_gate_dense/kernel", (W, 40), False),
        ("sparse_moe_block/shared_expert/feedforward_intermediate_dense/kernel", (W, 40), False),
        ("sparse_moe_block/shared_expert/feedforward_output_dense/kernel", (40, W), False),
        ("sparse_moe_block/shared_expert_gate/kernel", (W, 1), False),
    ]),
    "gpt_oss": ("transformer_layer", [
        *((role, shape, False) for role, shape in ATTENTION),
        ("sparse_moe_block/router/router_dense/kernel", (W, E), False),
        ("sparse_moe_block/router/router_dense/bias", (E,), False),
        ("sparse_moe_block/experts/gate_up_proj", (E, W, 96), True),
        ("sparse_moe_block/experts/gate_up_proj_bias", (E, 96), True),
        ("sparse_moe_block/experts/down_proj", (E, 48, W), True),
        ("sparse_moe_block/experts/down_proj_bias", (E, W), True),
    ]),
    "gemma4": ("decoder_block", [
        ("attention/query/kernel", (4, W, 8), False),  # heads first, as many as experts
        ("attention/attention_output/kernel", (4, 8, W), False),
        ("ffw_gating/kernel", (W, 64), False),
        ("ffw_linear/kernel", (64, W), False),
        ("moe_router/per_dim_scale", (W,), False),
        ("moe_router/proj/kernel", (W, E), False),
        ("moe_expert_bank/gate_proj", (E, W, 48), True),
        ("moe_expert_bank/up_proj", (E, W, 48), True),
        ("moe_expert_bank/down_proj", (E, 48, W), True),
        ("moe_expert_bank/per_expert_scale", (E,), True),
    ]),
}  # fmt: skip


def blocks(family: str) -> list[LayerInfo]:
    name, weights = FAMILIES[family]
    return [
        LayerInfo(
            f"{name}_{i}",
            "other",
            tuple(VariableInfo(f"{name}_{i}/{role}", shape, role) for role, shape, _ in weights),
        )
        for i in range(BLOCKS)
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_card_counts_each_familys_routed_experts_by_top_k(family):
    name, weights = FAMILIES[family]
    routed = BLOCKS * sum(math.prod(shape) for _, shape, expert in weights if expert)
    total = BLOCKS * sum(math.prod(shape) for _, shape, _ in weights)
    found = expert_figures(find_banks(blocks(family)), K)
    count = {
        "parameters": total,
        "flops": 6.0 * total,
        "kept_bytes": 0.0,
        "structure": {"blocks": BLOCKS, "hidden": W, "heads": 4},
        "experts": found,
    }
    card = model_card(count, "bf16", "adam", family, sequence=1)
    assert (card.experts, card.top_k, card.expert_parameters) == (E, K, routed)
    # the routers, the shared experts and their gates are dense: every token goes through them
    assert card.active_parameters == total - routed * (1 - K / E)
    # the bank's layer, as the count names its residuals' layers (its kept bytes are read so)
    bank = {f"{name}/{role.rpartition('/')[0]}" for role, _, expert in weights if expert}
    assert found["bank_paths"] == sorted(bank)
