"""`expert` on JAX trains the weights one device trains, to 1e-5, for each of keras-hub's six MoE
families built tiny from a config (4 experts, top 2: Mixtral, Qwen-MoE, Qwen3-MoE, Qwen3.5-MoE,
gpt-oss and Gemma 4): the experts on 2 and 4 devices and on a (data 2, expert 2) mesh, dense
(keras-hub's bank) and dispatched (the kit's all-to-all, with room for every token), and
Qwen3-MoE under its own layout map too. Qwen3-MoE's first layer is dense (`mlp_only_layers`) and
stays so. A swap that would change a block is refused before training, in one sentence.

A pipeline of either model trains one device's weights too, on one device a stage, and
Mixtral's with each stage on a (data, model) sub-mesh whose model axis divides the experts. The
router's load-balancing loss is shown to move the weights beyond the tolerance, so every
equality here shows it kept. Weights only (`measure_comm=False`) but for the tests that measure
a run's communication, its memory by part and its dropped tokens; a model `expert` cannot split
is refused in one sentence.
"""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from tests.builders import largest_difference, runs_side_by_side, saved_weights
from tests.hub_models import SEQUENCE
from tests.moe_models import (
    BUILDERS,
    EXPERT_BYTES_PER_BLOCK,
    EXPERTS,
    MOE_LAYERS,
    SIZE,
    TOP_K,
    gpt_oss_with_mixing_experts,
    mixtral_with_jitter,
    mixtral_with_mixing_experts,
    mixtral_without_router_loss,
    moe_tokens,
)

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
ROOMY = 2.0  # capacity_factor = experts ÷ top-k: every token fits, none is dropped
PLANS = {
    "expert-2": dict(devices=2),
    "expert-4": dict(devices=4),
    "expert-2x2": dict(devices=4, mesh=(2, 2)),
    "dispatched-2": dict(devices=2, experts="dispatched", capacity_factor=ROOMY),
    "dispatched-4": dict(devices=4, experts="dispatched", capacity_factor=ROOMY),
    "dispatched-2x2": dict(devices=4, mesh=(2, 2), experts="dispatched", capacity_factor=ROOMY),
    "own-2x2": dict(devices=4, mesh=(2, 2), layout_map="own"),
}
PIPELINED = {"mixtral", "qwen3_moe"}  # a pipeline cuts every family's blocks alike


def _experiment(name: str, **settings) -> gpk.Experiment:
    return gpk.Experiment(
        BUILDERS[name],
        moe_tokens(family=name),
        batch_size=16,
        epochs=1,
        steps_per_epoch=2,
        backend="jax",
        progress=False,
        **{"measure_comm": False, **settings},
    )


def _family_plans(name: str) -> dict[str, dict]:
    """The plans a family is run on: its own layout map only where keras-hub gives one."""
    own = name == "qwen3_moe"
    return {plan: s for plan, s in PLANS.items() if own or not plan.startswith("own")}


@pytest.fixture(scope="module", params=list(BUILDERS))
def trained_alone(request, tmp_path_factory):
    """The family's one-device weights, and its runs of every plan started beside it, two at a
    time (`builders.runs_side_by_side`): `runs[plan]` is a future of (row, weights' path)."""
    name = request.param
    experiment = _experiment(name)
    plans = {"single": dict(strategy="single", devices=1)}
    plans |= {plan: dict(strategy="expert", **s) for plan, s in _family_plans(name).items()}
    runs = runs_side_by_side(experiment, tmp_path_factory.mktemp(name), plans)
    result, path = runs.pop("single").result()
    assert result.ok, result.reason
    return name, experiment, saved_weights(path), runs


@pytest.mark.parametrize("plan", list(PLANS))
def test_expert_trains_the_weights_of_one_device(trained_alone, plan, record_property):
    name, experiment, reference, runs = trained_alone
    if plan not in runs:
        pytest.skip(f"keras-hub's {name} backbone has no get_layout_map")
    result, path = runs[plan].result()
    assert result.ok, f"{name} {plan}: {result.reason}"
    difference = largest_difference(saved_weights(path), reference)
    record_property("difference", difference)  # the closing notes' figures, in --junitxml
    assert difference <= TOLERANCE, (name, plan, difference)
    experts = result.extra["experts"]
    layers = MOE_LAYERS.get(name, 2)
    assert [b["experts"] for b in experts["banks"]] == [4] * layers
    if experts["kind"] == "dispatched":
        assert experts["dropped_tokens"] == 0
        assert experts["routed_tokens"] == 16 * 16 * 2 * layers


def test_a_pipeline_of_a_mixture_of_experts_trains_the_weights_of_one_device(
    trained_alone, tmp_path
):
    """The kit's JAX stages cut the MoE blocks whole, each stage keeping its router's loss."""
    name, experiment, reference, _ = trained_alone
    if name not in PIPELINED:
        pytest.skip("a pipeline of MoE blocks is covered on Mixtral and Qwen3-MoE")
    path = tmp_path / "pipeline.npz"
    result = experiment.run("pipeline", 2, save_weights=str(path))
    assert result.ok, f"{name} pipeline: {result.reason}"
    assert largest_difference(saved_weights(path), reference) <= TOLERANCE, name
    # Each stage on a (data 2, model 2) sub-mesh: the model axis divides its block's experts
    # too (sharding/experts.with_experts_split), not only its attention heads; found by shape,
    # so checked on Mixtral alone.
    if name != "mixtral":
        return
    meshed = experiment.run("pipeline", 8, mesh=(2, 2), save_weights=str(path))
    assert meshed.ok, f"{name} pipeline on a mesh: {meshed.reason}"
    assert largest_difference(saved_weights(path), reference) <= TOLERANCE, name
    whole = result.extra["memory"]["devices"]
    split = meshed.extra["memory"]["devices"]
    for stage, alone in zip(meshed.extra["stages"], sorted(whole), strict=True):
        held = {split[device]["params_bytes"] for device in stage["devices"]}
        assert len(held) == 1  # the stage's four devices hold alike shares
        assert whole[alone]["params_bytes"] - held.pop() >= EXPERT_BYTES_PER_BLOCK[name] // 2


def test_the_router_loss_moves_the_weights_so_the_equalities_show_it_kept(trained_alone, tmp_path):
    """Without its load-balancing loss Mixtral trains other weights than with it, beyond the
    tolerance: so a dispatched or pipelined run that dropped the loss could not pass above."""
    name, _, reference, _ = trained_alone
    if name != "mixtral":
        pytest.skip("the loss is switched off on Mixtral")
    path = tmp_path / "without.npz"
    experiment = gpk.Experiment(
        mixtral_without_router_loss, moe_tokens(), batch_size=16, epochs=1, steps_per_epoch=2,
        backend="jax", progress=False, measure_comm=False,
    )  # fmt: skip
    assert experiment.run("single", 1, save_weights=str(path)).ok
    assert largest_difference(saved_weights(path), reference) > 10 * TOLERANCE


def test_experts_over_two_processes_train_the_weights_of_one_device(trained_alone, tmp_path):
    """One mesh over 2 workers × 1 device through `jax.distributed`, an expert pair each,
    dispatched: the layout the dense bank shares, and the all-to-alls across the processes
    (gloo), dropping no token."""
    name, experiment, reference, _ = trained_alone
    if name != "mixtral":
        pytest.skip("two processes are covered on Mixtral")
    path = tmp_path / "workers.npz"
    settings = {"experts": "dispatched", "capacity_factor": ROOMY}
    result = experiment.run("expert", 1, workers=2, save_weights=str(path), **settings)
    assert result.ok, result.reason
    assert (result.mesh, result.workers) == ("1x2", 2)
    assert largest_difference(saved_weights(path), reference) <= TOLERANCE
    assert result.extra["experts"]["dropped_tokens"] == 0


@pytest.fixture(scope="module")
def measured():
    """Mixtral's experts on 2 devices, dense and dispatched at capacity 1.0, measured."""
    experiment = _experiment("mixtral", measure_comm=True)
    return {
        kind: experiment.run("expert", 2, experts=kind, capacity_factor=1.0)
        for kind in ("dense", "dispatched")
    }


@pytest.mark.parametrize("kind", ["dense", "dispatched"])
def test_the_communication_is_measured_and_counted_in_bytes(measured, kind):
    result = measured[kind]
    assert result.ok, result.reason
    assert result.comm_bytes > 0 and result.extra["traffic_bytes_per_device"] > 0
    assert result.extra.get("comm_measured", True)
    timed = "standalone_all_to_all_s" if kind == "dispatched" else "standalone_all_reduce_s"
    assert result.extra[timed] > 0  # below its noise, comm_time_s may be blank
    if kind == "dispatched":
        assert result.extra["experts"]["all_to_all_bytes"] > 0
        assert "all-to-all" in result.extra["comm_method"]


@pytest.mark.parametrize("kind", ["dense", "dispatched"])
def test_each_device_holds_half_the_experts(measured, kind):
    experts = measured[kind].extra["experts"]
    held = experts["expert_bytes_per_device"]
    assert len(held) == 2 and set(held.values()) == {experts["expert_bytes"] // 2}
    parts = measured[kind].extra["memory"]["devices"]
    assert all(p["params_bytes"] < measured[kind].extra["parameter_bytes"] for p in parts.values())


def test_the_row_shows_dropped_tokens_and_the_flops_against_the_dense_bank(measured):
    table = gpk.Comparison(list(measured.values())).table
    dense, dispatched = (
        table[table["experts"] == kind].iloc[0] for kind in ("dense", "dispatched")
    )
    assert dense["expert_flops"] == dense["dense_expert_flops"]
    assert dispatched["expert_flops"] == pytest.approx(0.5 * dispatched["dense_expert_flops"])
    assert 0 < dispatched["dropped_tokens"] < dispatched["routed_tokens"]
    # Activations as counted from Mixtral's config: the dense bank keeps its 2 local experts'
    # outputs (gate and up 64 each, down the width 32) for all 16 × 16 tokens, in 2 blocks,
    # float32; dispatched at capacity 1.0 keeps experts ÷ top-k = 2 times fewer.
    blocks = MOE_LAYERS.get("mixtral", 2)
    dense_outputs = 16 * SEQUENCE * (EXPERTS // 2) * (64 + 64 + SIZE["hidden_dim"]) * blocks * 4
    kept = dense["activations_bytes"] - dispatched["activations_bytes"]
    assert kept == dense_outputs - dense_outputs * TOP_K // EXPERTS


@pytest.mark.parametrize(
    ("model", "data", "devices", "words"),
    [
        ("mlp", "tabular", 2, "found no mixture-of-experts block in the model"),
        (BUILDERS["mixtral"], moe_tokens(), 3, "the expert axis of 3 devices does not divide"),
    ],
    ids=["dense-model", "indivisible-experts"],
)
def test_a_model_expert_cannot_split_is_refused_in_one_sentence(model, data, devices, words):
    experiment = gpk.Experiment(
        model,
        data,
        batch_size=24,
        steps_per_epoch=1,
        backend="jax",
        progress=False,
        measure_comm=False,
    )
    result = experiment.run("expert", devices)
    assert not result.ok and words in result.reason
    sentence = result.reason.splitlines()[0] if "\n" in result.reason else result.reason
    assert sentence.replace("e.g. ", "").count(". ") == 0


@pytest.mark.parametrize(
    ("builder", "words"),
    [
        (
            mixtral_with_mixing_experts,
            "experts='dispatched' would train another model than the one built: "
            "MixtralSparseMoeBlock",
        ),
        (
            gpt_oss_with_mixing_experts,
            "experts='dispatched' would train another model than the one built: "
            "GptOssSparseMoeBlock",
        ),
        (mixtral_with_jitter, "router_jitter_noise=0.1 on MixtralSparseMoeBlock"),
    ],
    ids=["a-block-the-swap-changes", "a-gpt-oss-block-the-swap-changes", "a-random-router"],
)
def test_a_swap_that_would_change_a_block_is_refused_before_training(builder, words):
    """A bank whose output reads the experts a token is not routed to is held against its own
    call on the first batch and refused; a router made random cannot be held so, and is
    refused before the model trains."""
    experiment = gpk.Experiment(
        builder, moe_tokens(), batch_size=16, steps_per_epoch=1, backend="jax",
        progress=False, measure_comm=False,
    )  # fmt: skip
    result = experiment.run("expert", 2, experts="dispatched", capacity_factor=ROOMY)
    assert not result.ok and words in result.reason, result.reason
    assert "use experts='dense'" in result.reason
    assert result.reason.replace("e.g. ", "").count(". ") == 0
    assert not result.step_time_s  # nothing trained
