"""`pipeline` on JAX beyond a chain of Dense layers: a Transformer block's residual streams, a
nested subclassed block (one unit, never rebuilt from its config), several inputs and outputs,
a keras-hub GPT-2 backbone cut between its own layers, BatchNormalization's micro-batch
statistics, Dropout's masks through a recomputed backward, and the refusals, each one sentence.

About 90 s on 2 cores (the Transformer block's three runs take about 25 s, GPT-2's two 15 s).
"""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest

import gpu_parallel_kit as gpk
from tests import builders, hub_models
from tests.builders import largest_difference, saved_weights, small_experiment

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5


def _equals_one_device(experiment, tmp_path, plans, losses=False):
    """Each plan's trained weights (and with `losses` its loss history) against `single`'s;
    the pipeline runs."""
    single = experiment.run("single", 1, save_weights=str(tmp_path / "single.npz"))
    reference = saved_weights(tmp_path / "single.npz")
    runs = []
    for index, plan in enumerate(plans):
        path = tmp_path / f"{index}.npz"
        result = experiment.run("pipeline", save_weights=str(path), **plan)
        assert result.ok, result.reason
        assert largest_difference(saved_weights(path), reference) <= TOLERANCE, plan
        if losses:
            expected = pytest.approx(single.history["loss"], abs=TOLERANCE)
            assert result.history["loss"] == expected, plan
        runs.append(result)
    return runs


def test_a_transformer_block_trains_like_one_device(tmp_path):
    experiment = gpk.Experiment(
        model=builders.transformer_block,
        data=builders.transformer_data(),
        batch_size=32,
        steps_per_epoch=2,
        backend="jax",
        progress=False,
    )
    plans = [dict(devices=2, schedule=schedule, micro_batches=4) for schedule in ("gpipe", "1f1b")]
    gpipe, _ = _equals_one_device(experiment, tmp_path, plans)
    # Cut inside the block: the residual stream crosses with what the second stage reads.
    assert len(gpipe.extra["stages"]) == 2 and gpipe.extra["stages"][1]["receives"]


def test_a_subclassed_block_is_one_unit_its_config_never_rebuilt(tmp_path):
    """The block's get_config() does not rebuild it (TensorFlow's stages refuse it); JAX's
    stages call the user's own layer objects, so it trains."""
    model = functools.partial(builders.nested_subclassed_model, rebuildable=False)
    experiment = small_experiment(model, steps_per_epoch=2, backend="jax")
    (result,) = _equals_one_device(
        experiment, tmp_path, [dict(devices=2, schedule="gpipe", micro_batches=2)]
    )
    assert [s["layers"] for s in result.extra["stages"]] == [["hidden_block"], ["head"]]


def _two_outputs():
    x, y = builders.small_data()
    return x, (y, x[:, :1] * 2.0)


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (builders.two_input_model, builders.two_input_arrays),  # a dict of inputs
        (builders.two_output_model, _two_outputs),  # one loss per output, weighted
    ],
    ids=["two-inputs", "two-outputs"],
)
def test_several_inputs_or_outputs_train_like_one_device(tmp_path, model, data):
    experiment = gpk.Experiment(
        model=model, data=data(), batch_size=32, steps_per_epoch=2, backend="jax", progress=False
    )
    _equals_one_device(experiment, tmp_path, [dict(devices=2, schedule="1f1b", micro_batches=2)])


def test_a_first_stages_added_loss_is_in_the_reported_loss(tmp_path):
    """An activity regularizer's loss, added in the first of two stages, in the loss history
    as one device reports it, whether the backward recomputes or keeps its forward."""
    experiment = small_experiment(
        builders.regularized_first_stage, epochs=2, steps_per_epoch=2, backend="jax"
    )
    plans = [
        dict(devices=2, schedule="1f1b", micro_batches=2, recompute=recompute)
        for recompute in (True, False)
    ]
    _equals_one_device(experiment, tmp_path, plans, losses=True)


@pytest.mark.skipif(
    importlib.util.find_spec("keras_hub") is None, reason="keras-hub is not installed"
)
def test_a_gpt2_backbone_is_cut_between_its_own_layers(tmp_path):
    experiment = gpk.Experiment(
        model=hub_models.gpt2,
        data=hub_models.tokens("gpt2"),
        batch_size=32,
        steps_per_epoch=2,
        backend="jax",
        progress=False,
    )
    (result,) = _equals_one_device(
        experiment, tmp_path, [dict(devices=4, schedule="1f1b", micro_batches=4)]
    )
    firsts = list(result.stages["first_layer"])
    assert "gpt2_backbone/transformer_layer_1" in firsts, firsts
    assert all(layer.startswith("gpt2_backbone/") for layer in firsts[:-1]), firsts


@pytest.mark.parametrize("recompute", [True, False])
def test_batch_norm_uses_micro_batch_statistics(tmp_path, recompute):
    """Updated once per micro-batch, by its forward: never again by a recompute."""
    x, y = builders.small_data()
    experiment = gpk.Experiment(
        model=builders.batch_norm_first,
        data=(x, y),
        batch_size=32,
        steps_per_epoch=1,
        shuffle=False,
        backend="jax",
        progress=False,
    )
    path = tmp_path / "bn.npz"
    result = experiment.run(
        "pipeline",
        2,
        schedule="zb-h1",
        micro_batches=4,
        recompute=recompute,
        save_weights=str(path),
    )
    assert result.ok, result.reason
    moving_mean = saved_weights(path)[2]
    expected = np.zeros(x.shape[1], dtype="float32")
    for micro in np.split(x[:32], 4):  # momentum 0.5, one update per micro-batch
        expected = expected * 0.5 + micro.mean(axis=0) * 0.5
    np.testing.assert_allclose(moving_mean, expected, atol=1e-5)


def test_a_recomputed_backward_draws_the_dropout_masks_its_forward_drew(tmp_path):
    plan = dict(devices=2, schedule="1f1b", micro_batches=4)
    weights = {}
    for name, build, recompute in (
        ("kept", builders.dropout_chain, False),
        ("recomputed", builders.dropout_chain, True),
        ("no dropout", functools.partial(builders.dropout_chain, rate=0.0), True),
    ):
        path = tmp_path / f"{name}.npz"
        experiment = small_experiment(build, steps_per_epoch=3, backend="jax")
        result = experiment.run("pipeline", **plan, recompute=recompute, save_weights=str(path))
        assert result.ok, result.reason
        weights[name] = saved_weights(path)
    assert largest_difference(weights["recomputed"], weights["kept"]) <= TOLERANCE
    assert largest_difference(weights["recomputed"], weights["no dropout"]) > 1e-3


@pytest.mark.parametrize(
    ("model", "devices", "said"),
    [
        (builders.small_mlp, 4, "2 layers, fewer than 4 stages"),
        (builders.shared_layer_model, 2, "shared layer"),
    ],
)
def test_a_model_that_cannot_be_cut_is_one_sentence(model, devices, said):
    result = small_experiment(model, steps_per_epoch=2, backend="jax").run("pipeline", devices)
    assert result.status == "failed" and said in result.reason, result.reason
    assert "\n" not in result.reason and "Traceback" not in result.reason


def test_a_model_over_the_per_device_budget_fits_once_split():
    budget = 3 * 2**19  # 1.5 MiB: under the whole model's 3.2 MiB of states, over a stage's
    experiment = small_experiment(builders.wide_mlp, steps_per_epoch=2, backend="jax")
    single, split = experiment.compare(["single", "pipeline"], [4], memory_budget=budget).results
    assert single.status == "oom"
    assert split.status == "ok", split.reason
    devices = split.extra["memory"]["devices"]
    assert len(devices) == 4
    assert max(sum(parts.values()) for parts in devices.values()) <= budget
    assert sum(split.extra["state_bytes"].values()) > budget  # the whole would not have fit
