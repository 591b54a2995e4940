"""`gpk.search` end to end on a tiny keras-hub GPT-2 backbone: counted in the JAX child, its
structure read off the backbone, ranked. About 25 s on two cores (the JAX server's start and
the count), hence slow."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_parallel_kit as gpk

pytestmark = pytest.mark.slow

LAYERS, WIDTH, HEADS, SEQUENCE = 4, 64, 4, 32


def build_gpt2():
    import keras_hub

    return keras_hub.models.GPT2Backbone(
        vocabulary_size=256, num_layers=LAYERS, num_heads=HEADS, hidden_dim=WIDTH,
        intermediate_dim=4 * WIDTH, max_sequence_length=SEQUENCE, dropout=0.0,
    )  # fmt: skip


def test_a_gpt2_backbone_is_counted_read_and_ranked(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    sample = {"token_ids": np.zeros(SEQUENCE, "int32"), "padding_mask": np.ones(SEQUENCE, "int32")}
    cluster = gpk.GPUCluster("a100", nodes=2, per_node=8)
    found = gpk.search(build_gpt2, sample, cluster, global_batch=64, progress=False)
    card = found.card
    assert (card.layers, card.hidden, card.heads, card.sequence) == (LAYERS, WIDTH, HEADS, SEQUENCE)
    blocks = LAYERS * (12 * WIDTH**2 + 13 * WIDTH)
    assert card.parameters == blocks + (256 + SEQUENCE) * WIDTH + 2 * WIDTH
    assert card.flops_per_sample > 72 * SEQUENCE * LAYERS * WIDTH**2  # Megatron's matmuls, and more
    assert 0 < card.activation_bytes < card.flops_per_sample
    fitting = found.table[found.table["fits"]]
    assert found.best.step_time_s == fitting["step_time_s"].min()
    assert "read off its GPT2Backbone" in found.note
    assert f"at 1 and 2 blocks and extrapolated to {LAYERS}" in found.note  # counted by depth
