"""`gpk.search` on tiny keras-hub Mixtral backbones, counted in the JAX child: the dense expert
banks' FLOPs scaled to the routed experts, and the expert axis offered. Four counts of about
20 s each on two cores, hence slow."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.analysis.cost_model.model_card import bank_kept_bytes
from gpu_parallel_kit.planning import step_count

pytestmark = pytest.mark.slow

LAYERS, WIDTH, HEADS, FFN, SEQUENCE = 4, 64, 4, 512, 128


def mixtral(experts: int, top_k: int):
    def build():
        import keras_hub

        return keras_hub.models.MixtralBackbone(
            vocabulary_size=128, num_layers=LAYERS, num_query_heads=HEADS, hidden_dim=WIDTH,
            intermediate_dim=FFN, num_key_value_heads=2, num_experts=experts, top_k=top_k,
        )  # fmt: skip

    return build


def searched(build, tmp_path):
    sample = {"token_ids": np.zeros(SEQUENCE, "int32"), "padding_mask": np.ones(SEQUENCE, "int32")}
    cluster = gpk.GPUCluster("h100", nodes=1, per_node=8)
    return gpk.search(build, sample, cluster, global_batch=16, progress=False)


def test_the_dense_banks_are_counted_at_top_k_of_their_experts(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(step_count, "_counted", {})  # this test's two counts alone
    four = searched(mixtral(4, 2), tmp_path)
    # keras-hub imports TensorFlow in the children that read the model: none of its start-up
    # lines reaches the user's stderr.
    assert capfd.readouterr().err == ""
    two = searched(mixtral(2, 2), tmp_path)
    # Four experts' dense bank computes twice two's on every token; each token goes through two
    # experts of either, so their active FLOPs are one (the router and the update aside).
    expert = 3 * WIDTH * FFN
    assert four.card.expert_parameters == LAYERS * 4 * expert
    assert two.card.expert_parameters == LAYERS * 2 * expert
    assert (four.card.experts, four.card.top_k) == (4, 2)
    dense_gap = 6 * SEQUENCE * LAYERS * 2 * expert  # what the count gives four's bank beyond two's
    assert abs(four.card.flops_per_sample - two.card.flops_per_sample) < dense_gap / 10
    assert four.card.flops_per_sample == pytest.approx(two.card.flops_per_sample, rel=0.05)
    assert {int(e) for e in four.table["expert"]} == {1, 2, 4}
    assert {int(e) for e in two.table["expert"]} == {1, 2}
    # The count names the layers' kept bytes as the expert reader names the banks' layers, and a
    # dense bank keeps per expert: four experts' banks keep twice what two experts' keep.
    kept = [
        bank_kept_bytes(count["experts"]["bank_paths"], count["kept_by_path"])
        for count in step_count._counted.values()
        if count["experts"].get("experts") in (4, 2)
    ]
    assert len(kept) == 2 and min(kept) > 0
    assert max(kept) / min(kept) == pytest.approx(2.0, rel=0.1)
