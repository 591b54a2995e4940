"""Models users really write train under every strategy with the weights of one device.

A subclassed model and a Sequential without `keras.Input` have no variables until their first call;
a two-input functional model takes a dict; a two-output one has a loss per output. Each trains under
single, data (fit and explicit), multiworker (2 local workers × 1 device on the CPU) and, where the
model has a graph, model (2 stages), and every strategy's trained weights equal single-device
training to 1e-5. The weights are saved before anything is measured apart from training, so the
runs skip the communication measurement (`measure_comm=False`): test_multiworker.py and
test_communication.py check it.
"""

from __future__ import annotations

import functools

import pytest

import gpu_parallel_kit as gpk
from tests.builders import (
    deferred_sequential,
    largest_difference,
    nested_blocks_model,
    nested_subclassed_model,
    saved_weights,
    small_data,
    subclassed_model,
    two_input_arrays,
    two_input_dataset,
    two_input_model,
    two_output_dataset,
    two_output_model,
)

pytestmark = pytest.mark.slow

PLANS = {
    "data-fit": dict(strategy="data", devices=2, mode="fit"),
    "data-explicit": dict(strategy="data", devices=2, mode="explicit"),
    "multiworker": dict(strategy="multiworker", devices=1, workers=2),
    "model": dict(strategy="model", devices=2),
    # Four stages of the two-input model leave one with no weights at all (the Concatenate).
    "model-4": dict(strategy="model", devices=4),
    "model-4-eager": dict(strategy="model", devices=4, recompute=False),
}
MODELS = {
    "subclassed": (subclassed_model, small_data()),
    "deferred-sequential": (deferred_sequential, small_data()),
    "two-inputs": (two_input_model, two_input_dataset),
    "two-outputs": (two_output_model, two_output_dataset),
}


def _experiment(name: str) -> gpk.Experiment:
    model, data = MODELS[name]
    return gpk.Experiment(
        model=model,
        data=data,
        batch_size=32,
        epochs=1,
        steps_per_epoch=3,
        progress=False,
        measure_comm=False,
    )


@pytest.fixture(scope="module", params=list(MODELS))
def trained_alone(request, tmp_path_factory):
    """(model name, experiment, the weights single-device training gives)."""
    experiment = _experiment(request.param)
    path = tmp_path_factory.mktemp(request.param) / "single.npz"
    result = experiment.run(strategy="single", devices=1, save_weights=str(path))
    assert result.ok, result.reason
    return request.param, experiment, saved_weights(path)


@pytest.mark.parametrize("plan", list(PLANS))
def test_every_strategy_trains_the_users_model_like_one_device(trained_alone, plan, tmp_path):
    name, experiment, reference = trained_alone
    if name == "deferred-sequential" and plan.startswith("model-4"):
        pytest.skip("two layers: fewer than four stages")
    if name == "subclassed" and plan.startswith("model"):
        pytest.skip("a subclassed model has no graph to cut: see the refusal test")
    path = tmp_path / "weights.npz"
    result = experiment.run(**PLANS[plan], save_weights=str(path))
    assert result.ok, f"{name} under {plan}: {result.reason}"
    assert largest_difference(saved_weights(path), reference) <= 1e-5


def test_a_subclassed_model_under_model_parallel_gets_one_sentence():
    result = _experiment("subclassed").run(strategy="model", devices=2)
    assert result.status == "failed"
    assert "subclassed" in result.reason and "strategy='data'" in result.reason
    assert "Traceback" not in result.reason and "AttributeError" not in result.reason


@pytest.fixture(scope="module")
def arrays_alone(tmp_path_factory):
    """The two-input model fed a dict of arrays, and its weights after single-device training,
    trained once for every strategy compared with it."""
    experiment = gpk.Experiment(
        model=two_input_model,
        data=two_input_arrays(),
        batch_size=32,
        epochs=1,
        steps_per_epoch=3,
        progress=False,
        measure_comm=False,
    )
    path = tmp_path_factory.mktemp("arrays") / "single.npz"
    alone = experiment.run(strategy="single", devices=1, save_weights=str(path))
    assert alone.ok, alone.reason
    return experiment, saved_weights(path)


@pytest.mark.parametrize("plan", ["data-fit", "multiworker", "model-4"])
def test_a_dict_of_arrays_trains_like_one_device(plan, arrays_alone, tmp_path):
    """data=({"numbers": x, "extra": e}, y), as `fit` takes it: each array memory-mapped on its
    own, the batch order the same for every strategy."""
    experiment, reference = arrays_alone
    path = tmp_path / "other.npz"
    other = experiment.run(**PLANS[plan], save_weights=str(path))
    assert other.ok, other.reason
    assert largest_difference(saved_weights(path), reference) <= 1e-5


def test_a_pipeline_cuts_inside_nested_models_and_trains_like_one_device(tmp_path):
    experiment = gpk.Experiment(
        model=nested_blocks_model,
        data=small_data(),
        batch_size=32,
        steps_per_epoch=3,
        progress=False,
    )
    paths = [tmp_path / f"{name}.npz" for name in ("single", "pipeline")]
    alone = experiment.run(strategy="single", devices=1, save_weights=str(paths[0]))
    split = experiment.run(strategy="pipeline", devices=4, save_weights=str(paths[1]))
    assert alone.ok and split.ok, (alone.reason, split.reason)
    # One stage per layer call, the nested ones named inside their block.
    layers = [list(stage) for stage in split.stages["layers"]]
    assert layers == [["block/inner_a"], ["block/inner_b"], ["chain/chain_a"], ["head"]]
    assert largest_difference(saved_weights(paths[1]), saved_weights(paths[0])) <= 1e-5


def test_a_nested_subclassed_model_that_leaves_too_few_layers_is_named():
    experiment = gpk.Experiment(
        model=nested_subclassed_model,
        data=small_data(),
        batch_size=32,
        steps_per_epoch=2,
        progress=False,
    )
    assert experiment.run(strategy="pipeline", devices=2).ok  # the block is one stage
    refused = experiment.run(strategy="pipeline", devices=4)
    assert refused.status == "failed"
    assert "'hidden_block' is a subclassed keras.Model" in refused.reason
    assert "devices=2 or fewer" in refused.reason


def test_a_nested_layer_its_config_cannot_rebuild_is_named():
    experiment = gpk.Experiment(
        model=functools.partial(nested_subclassed_model, rebuildable=False),
        data=small_data(),
        batch_size=32,
        steps_per_epoch=2,
        progress=False,
    )
    refused = experiment.run(strategy="pipeline", devices=2)
    assert refused.status == "failed"
    assert refused.reason.startswith("layer 'hidden_block' (Fixed) cannot be rebuilt"), (
        refused.reason
    )
