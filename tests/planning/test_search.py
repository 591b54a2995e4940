"""`gpk.search` on the caller's side: the sample, the checks made before counting, the count kept
for the next search, the card read off the count (the counting child stood in for by `COUNT`)."""

from __future__ import annotations

import ast
import json
import pathlib

import numpy as np
import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.analysis.cost_model.model_card import KERNELS_PER_BLOCK, model_card
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.planning.sample_inputs import sample_spec, sequence_of
from gpu_parallel_kit.planning.step_count import PLAN_COUNT_ENTRY, count_key
from gpu_parallel_kit.runs.description.sources import CountedSample, model_source

from .conftest import COUNT

DATA = pathlib.Path(__file__).parents[1] / "analysis" / "data"

TOKENS = {"token_ids": np.zeros(32, "int32"), "padding_mask": np.ones(32, "int32")}
CLUSTER = gpk.GPUCluster("a100", nodes=2, per_node=8)


def build():  # never called here: the counting child is stood in for
    raise AssertionError("the model is built in the counting child only")


def test_one_sample_becomes_shapes_and_dtypes():
    spec = sample_spec(TOKENS)
    assert spec == {"padding_mask": ((32,), "int32"), "token_ids": ((32,), "int32")}
    assert sequence_of(spec) == 32
    assert sample_spec(np.zeros((16, 8), "float32")) == ((16, 8), "float32")
    assert sample_spec([np.zeros(4), np.zeros((2, 3))]) == [((4,), "float64"), ((2, 3), "float64")]
    assert sample_spec({"x": ((2048,), "int32")}) == {"x": ((2048,), "int32")}


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(gpus="a100"), "gpus='a100' is not a cluster; give gpk.GPUCluster("),
        (dict(global_batch=0), "global_batch=0"),
        (dict(precision="int8"), "precision='int8' is not known"),
        (dict(optimizer="adamax"), "optimizer='adamax' is not known"),
        (dict(inputs=None), "inputs= is missing"),
        (dict(blocks=0), "blocks=0"),
    ],
)
def test_bad_input_is_one_sentence_before_any_count(counted, change, message):
    asked = {**dict(model=build, inputs=TOKENS, gpus=CLUSTER, global_batch=64), **change}
    with pytest.raises(GpkError, match=message.replace("(", r"\(")):
        gpk.search(**asked)
    assert counted == []


def test_the_count_is_kept_so_the_next_search_counts_nothing(counted, tmp_path):
    first = gpk.search(build, TOKENS, CLUSTER, 64, progress=False)
    again = gpk.search(build, TOKENS, gpk.GPUCluster("h100", nodes=1), 32, progress=False)
    assert len(counted) == 1 and counted[0][2] == "mixed_bfloat16"
    assert "counted now" in first.note and "kept from an earlier count" in again.note
    kept = list((tmp_path / "cache" / "plan_counts").glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["parameters"] == COUNT["parameters"]
    gpk.search(build, TOKENS, CLUSTER, 64, precision="fp32", progress=False)
    assert [c[2] for c in counted] == ["mixed_bfloat16", "float32"]  # another key


def test_the_card_comes_from_the_count_and_the_structure_the_model_says(counted):
    found = gpk.search(build, TOKENS, CLUSTER, 64, progress=False)
    card = found.card
    assert (card.layers, card.hidden, card.heads, card.sequence) == (4, 64, 4, 32)
    assert card.parameters == COUNT["parameters"] and card.flops_per_sample == COUNT["flops"]
    assert card.activation_bytes == np.mean([COUNT["by_layer"][n] for n in
                                             COUNT["structure"]["block_names"]])  # fmt: skip
    assert found.best.fits and "read off its GPT2Backbone" in found.note


def test_a_model_whose_layers_were_not_counted_is_told_what_would_card_it():
    count = {**COUNT, "structure": {}}
    with pytest.raises(GpkError) as raised:
        model_card(count, "bf16", "adam", "mymodels.build", sequence=32)
    sentence = str(raised.value)
    assert sentence.startswith("mymodels.build is neither a Transformer stack the search can read")
    assert sentence.endswith("pass blocks=, hidden=, heads=")
    card = model_card(count, "bf16", "adam", "m", blocks=4, hidden=64, heads=4, sequence=32)
    assert card.activation_bytes == COUNT["kept_bytes"] / 4  # no block names: the whole over L


def test_the_kernels_per_block_come_from_the_count_else_megatrons():
    by_depth = {**COUNT, "kernels": 900, "per_block": {"kernels": 190}}
    assert model_card(by_depth, "bf16", "adam", "m", sequence=32).kernels_per_block == 190
    whole = {**COUNT, "kernels": 900}
    assert model_card(whole, "bf16", "adam", "m", sequence=32).kernels_per_block == 900 / 4
    card = model_card(COUNT, "bf16", "adam", "m", sequence=32)
    assert card.kernels_per_block == KERNELS_PER_BLOCK


def test_the_card_carries_the_kv_heads_vocabulary_and_scores_the_count_found():
    said = {**COUNT["structure"], "kv_heads": 2, "vocabulary": 256}
    by_depth = {**COUNT, "structure": said,
                "per_block": {"scores_bytes": 5e4, "parameters": 5e4, "flops": 1e7}}  # fmt: skip
    card = model_card(by_depth, "bf16", "adam", "m", sequence=32)
    assert (card.kv_heads, card.key_value_heads, card.vocabulary) == (2, 2, 256)
    assert (card.score_bytes, card.block_parameters, card.block_flops) == (5e4, 5e4, 1e7)
    whole = model_card({**COUNT, "scores_bytes": 4e4}, "bf16", "adam", "m", sequence=32)
    assert whole.score_bytes == 4e4 / 4 and whole.key_value_heads == whole.heads
    # A count made before the scores were read: Korthikanti's 5·a·s² at 16 bits.
    assert model_card(COUNT, "bf16", "adam", "m", sequence=32).score_bytes == 5 * 4 * 32**2


def test_an_unknown_attention_is_one_sentence_before_any_count(counted):
    with pytest.raises(GpkError, match="attention='fast' is not known; use 'flash' or"):
        gpk.search(build, TOKENS, CLUSTER, 64, attention="fast", progress=False)
    assert counted == []


def test_the_counting_entry_point_exists():
    module, _, function = PLAN_COUNT_ENTRY.partition(":")
    path = pathlib.Path(gpk.__file__).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    names = {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}
    assert function in names


def test_a_built_in_model_without_transformer_blocks_is_planned_layer_by_layer(
    counted, monkeypatch
):
    """The count of a model without Transformer blocks names its layers (a stored count of the
    lab's MLP, its dense layers as the sharding rules read them): the one planner lists data,
    fsdp, pipeline and tensor plans of it."""
    stored = json.loads((DATA / "mlp_jax_count.json").read_text())
    widths = (32, 256, 256, 128, 10)  # the lab's MLP: 32 features, 10 classes
    infos = [_dense_info(layer["name"], widths[i], widths[i + 1])
             for i, layer in enumerate(stored["layers"])]  # fmt: skip
    layered = {**COUNT, "structure": {}, **stored, "layer_infos": infos}
    monkeypatch.setattr("tests.planning.conftest.COUNT", layered)
    exp = gpk.Experiment(model="mlp", data="tabular")
    found = exp.search(gpus=gpk.GPUCluster("h100", nodes=1, per_node=8), global_batch=64)
    assert found.best.fits and list(found.layers()["kind"]) == ["Dense"] * 4
    assert "4 layers" in found.note and "split its dense and convolution pairs" in found.note
    table = found.table
    assert set(table["sharding"]) == {"none", "zero-1", "zero-2", "fsdp"}
    assert (table["tensor"] > 1).any() and (table["stages"] > 1).any()
    sample = counted[0][1]
    assert (sample.inputs, sample.labels, sample.given_by) == (((32,), "float32"), ((), "int32"),
                                                               "data")  # fmt: skip


def _dense_info(name: str, inputs: int, outputs: int) -> dict:
    """A dense layer's kernel as a count sends it (`dataclasses.asdict` of a `LayerInfo`)."""
    kernel = {"path": f"{name}/kernel", "shape": [inputs, outputs], "role": "kernel",
              "trainable": True, "itemsize": 4}  # fmt: skip
    return {"name": name, "kind": "dense", "variables": [kernel], "heads": None,
            "in_elements": inputs, "out_elements": outputs}  # fmt: skip


def test_an_experiment_counts_on_its_own_labels_and_loss(counted):
    x = {"features": np.zeros((64, 16), "float32")}
    exp = gpk.Experiment(build, (x, np.zeros(64, "int64")), loss="sparse_categorical_crossentropy")
    exp.search(gpus=CLUSTER, global_batch=64, progress=False)
    assert counted[0][1] == CountedSample(
        inputs={"features": ((16,), "float32")},
        labels=((), "int64"),
        loss="sparse_categorical_crossentropy",
        given_by="data",
    )


def test_search_takes_one_sample_of_labels(counted):
    gpk.search(build, TOKENS, CLUSTER, 64, labels=np.int32(0), progress=False)
    assert counted[0][1].labels == ((), "int32") and counted[0][1].given_by == "inputs"


def test_labels_and_a_loss_are_part_of_the_count_key_only_where_given():
    source, inputs = model_source(build), sample_spec(TOKENS)
    plain = count_key(source, build, CountedSample(inputs), "float32", "adam")
    labelled = count_key(source, build, CountedSample(inputs, ((), "int32")), "float32", "adam")
    lossed = CountedSample(inputs, ((), "int32"), "sparse_categorical_crossentropy")
    assert len({plain, labelled, count_key(source, build, lossed, "float32", "adam")}) == 3


def test_a_keras_applications_resnet50_lists_tensor_and_fsdp_plans(counted, monkeypatch):
    """ResNet-50's real plan count (`worker/jax/plan_count.py` on keras.applications.ResNet50,
    224 × 224, a class index a sample, stored): `gpk.search` cards it by its 160 layers and lists
    data, fsdp, pipeline and tensor plans, the tensor ones splitting its convolution pairs."""
    stored = json.loads((DATA / "resnet50_plan_count.json").read_text())
    monkeypatch.setattr("tests.planning.conftest.COUNT", stored)
    node = gpk.GPUCluster("a100", nodes=1, per_node=8)
    image, label = np.zeros((224, 224, 3), "float32"), np.int32(0)
    found = gpk.search(build, image, node, 2048, labels=label, progress=False)
    assert len(found.layers()) == 160 and found.card.layers == 160
    assert "13 runs of repeated layers" in found.note
    table = found.table[found.table["fits"]]
    kinds = {(t > 1, s > 1, sharding) for t, s, sharding in
             zip(table["tensor"], table["stages"], table["sharding"], strict=True)}  # fmt: skip
    assert {(False, False, "none"), (False, False, "fsdp"), (False, True, "zero-1")} <= kinds
    assert {(True, False, "none"), (True, False, "fsdp")} <= kinds
    whole = table[(table["stages"] == 1) & (table["sharding"] == "none")]
    split, alone = whole[whole["tensor"] == 2], whole[whole["tensor"] == 1]
    assert split["params_bytes"].min() < alone["params_bytes"].min()
    assert (split["comm:tensor_s"] > 0).all()
