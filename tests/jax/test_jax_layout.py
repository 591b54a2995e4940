"""The layout the kit derives really shards the kernels: read from the arrays' own shardings."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk

pytestmark = pytest.mark.slow


def _placements(result):
    return {p["variable"]: p for p in result.extra["layout"]}


def test_the_mlp_pairs_split_column_then_row_and_each_device_holds_its_share():
    exp = gpk.Experiment(
        "mlp", "tabular", batch_size=32, steps_per_epoch=3, backend="jax", progress=False
    )
    single = exp.run("single", 1)
    tensor = exp.run("tensor", 2)
    assert single.ok and tensor.ok, (single.reason, tensor.reason)
    placed = _placements(tensor)
    first, second = placed["mlp/dense/kernel"], placed["mlp/dense_1/kernel"]
    assert (first["role"], first["axes"]) == ("column", ["", "model"])
    assert first["shard_shape"] == [first["shape"][0], first["shape"][1] // 2]
    assert (second["role"], second["axes"]) == ("row", ["model", ""])
    assert second["shard_shape"] == [second["shape"][0] // 2, second["shape"][1]]
    # four Dense layers make two pairs: the classifier is the second pair's row half
    assert [placed[f"mlp/dense_{i}/kernel"]["role"] for i in (2, 3)] == ["column", "row"]
    # parameters and optimizer state per device, from the shards placed: less than one device's
    held = tensor.extra["state_bytes"]
    assert set(held) == {"/cpu:0", "/cpu:1"}
    assert max(held.values()) < single.extra["state_bytes"]["/cpu:0"]
    # two all-reduces per pair and step (forward and backward), bytes from the layout
    assert len(tensor.extra["collectives"]) == 4 and tensor.comm_bytes > 0


def test_attention_splits_heads_and_the_embedding_its_vocabulary():
    exp = gpk.Experiment(
        "transformer", "tokens", batch_size=32, steps_per_epoch=2, backend="jax", progress=False
    )
    result = exp.run("tensor", 4)
    assert result.ok, result.reason
    placed = _placements(result)
    query = placed["multi_head_attention/query/kernel"]
    assert query["role"] == "heads" and query["shard_shape"][1] == query["shape"][1] // 4
    table = placed["embedding/embeddings"]
    assert table["role"] == "vocabulary" and table["shard_shape"][0] == table["shape"][0] // 4
    norm = placed["layer_normalization/gamma"]
    assert norm["role"] == "replicated" and norm["shard_shape"] == norm["shape"]


def test_a_users_layout_map_wins_over_the_derived_one():
    exp = gpk.Experiment(
        "mlp", "tabular", batch_size=32, steps_per_epoch=2, backend="jax", progress=False
    )
    result = exp.run("tensor", 2, layout_map={".*dense_1/kernel": (None, None)})
    assert result.ok, result.reason
    kept = _placements(result)["mlp/dense_1/kernel"]
    assert kept["role"] == "user" and kept["shard_shape"] == kept["shape"]


def test_the_models_own_layout_is_refused_in_one_sentence_where_it_has_none():
    exp = gpk.Experiment(
        "mlp", "tabular", batch_size=32, steps_per_epoch=2, backend="jax", progress=False
    )
    result = exp.run("tensor", 2, layout_map="own")
    assert result.status == "failed"
    assert "layout_map='own' takes the model's get_layout_map(), but 'mlp'" in result.reason
    with pytest.raises(gpk.GpkError, match="layout_map='own'.*is for strategy='tensor'"):
        exp.plan("fsdp", 2, layout_map="own")
