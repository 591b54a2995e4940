"""Megatron-Core's published Mixtral 8×7B run against the plan search's projection of its plan,
on the card `benchmarks/search_mixtral.py --store` counted (docs/published-runs.md)."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.planning.published_moe_run import MIXTRAL_8X7B, moe_card, project_moe
from tests.planning.test_published_runs import TOLERANCE

# Mixtral 8x7B's shape (Jiang et al. 2024, "Mixtral of Experts", arXiv 2401.04088, Table 1):
# 32 blocks of width 4,096, FFN 14,336, 8 experts, top-2, 32,000 tokens.
BLOCKS, WIDTH, FFN, EXPERTS, TOP_K, VOCABULARY = 32, 4096, 14336, 8, 2, 32000


def test_the_stored_card_holds_mixtrals_experts_and_active_flops():
    card = moe_card()
    assert (card.layers, card.hidden, card.experts, card.top_k) == (BLOCKS, WIDTH, EXPERTS, TOP_K)
    assert card.expert_parameters == BLOCKS * EXPERTS * 3 * WIDTH * FFN
    # 12.9 B active of 46.7 B (Mistral AI, "Mixtral of experts", December 2023)
    assert card.active_parameters == pytest.approx(12.9e9, rel=0.01)
    assert card.parameters == pytest.approx(46.7e9, rel=0.01)
    per_token = card.flops_per_sample / card.sequence
    six_n = 6 * card.active_parameters
    assert six_n < per_token < 1.10 * six_n  # attention on top of 6·N, within a tenth


def test_the_published_plan_is_projected_within_the_dense_runs_tolerance():
    projected = project_moe(MIXTRAL_8X7B)
    low, high = TOLERANCE
    assert low <= projected["ratio"] <= high, projected
    assert MIXTRAL_8X7B.cluster.gpus == 64 and MIXTRAL_8X7B.plan.expert == 8
