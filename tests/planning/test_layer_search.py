"""`exp.search` for a model without Transformer blocks: its layers' card ranked, the answer's
best, table and refusals, on a stored count (no child)."""

from __future__ import annotations

import json
import pathlib
from types import SimpleNamespace

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.planning.layer_search import LayerPlans, layer_search

DATA = pathlib.Path(__file__).parents[1] / "analysis" / "data"
NODE = gpk.GPUCluster("a100", nodes=1, per_node=8)


def experiment(name: str, counted=None):
    stored = json.loads((DATA / f"{name}_jax_count.json").read_text())
    found = stored if counted is None else counted
    return SimpleNamespace(
        experiment_id="e1",
        model=SimpleNamespace(name=name),
        counted_step=lambda experiment_id: found,
    )


def test_resnet50_is_ranked_with_its_layers_shown():
    plans = layer_search(experiment("resnet50"), NODE, 2048)
    assert isinstance(plans, LayerPlans) and plans.best["data"] == 8
    assert len(plans.layers()) == 160 and plans.table["fits"].iloc[0]
    assert "13 runs of repeated layers" in plans.note
    assert repr(plans).startswith("<LayerPlans resnet50: ") and "images" not in repr(plans)
    assert plans.top(3)["step_time_s"].is_monotonic_increasing


def test_16_bit_training_keeps_half_the_counted_activations():
    found = {p: layer_search(experiment("resnet50"), NODE, 2048, precision=p) for p in
             ("bf16", "fp32")}  # fmt: skip
    kept = {p: plans.layers()["kept_bytes"].sum() for p, plans in found.items()}
    assert kept["bf16"] == pytest.approx(kept["fp32"] / 2)


def test_nothing_fitting_says_what_the_leanest_needs():
    # all but a megabyte of each GPU kept free: no plan of ResNet-50 fits
    plans = layer_search(experiment("resnet50"), NODE, 2048, reserve=1 - 1e6 / 80e9)
    with pytest.raises(GpkError, match="leanest needs"):
        _ = plans.best


def test_a_step_that_could_not_be_counted_is_one_sentence():
    with pytest.raises(GpkError, match="could not be counted: no JAX"):
        layer_search(experiment("mlp", counted="no JAX here"), NODE, 64)


def test_the_explanation_names_the_bound_and_what_the_others_add():
    sentence = layer_search(experiment("resnet50"), NODE, 2048).explain()
    assert sentence.startswith("The best plan of resnet50, data 8, ")
    assert "bounded by memory bandwidth" in sentence
    assert "fsdp" in sentence and "its comm:data adds" in sentence
    assert "The fastest pipeline, data 4 × stages 2" in sentence and "its bubble adds" in sentence
