"""The pipeline engine on virtual CPU devices: the weights of single-device training, for every
schedule, with each stage's variables really on its own device."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import gpu_parallel_kit as gpk
from tests import builders
from tests.builders import largest_difference, saved_weights, small_experiment

pytestmark = pytest.mark.slow

CASES = [
    ("naive", 2, 1),
    ("naive", 4, 1),
    ("naive", 1, 1),  # one stage: forward, backward and update in one call
    ("1f1b", 1, 4),
    ("gpipe", 2, 1),
    ("gpipe", 2, 4),
    ("gpipe", 4, 1),
    ("gpipe", 4, 4),
    ("1f1b", 2, 1),
    ("1f1b", 2, 4),
    ("1f1b", 4, 1),
    ("1f1b", 4, 4),
    ("interleaved", 2, 2),
    ("interleaved", 2, 4),
    ("zb-h1", 2, 4),
    ("zb-h1", 4, 1),
    ("zb-h1", 4, 4),
]


EXPERIMENT = dict(model=builders.deep_mlp, steps_per_epoch=5)  # tests/engines/conftest.py


@pytest.fixture(scope="module")
def reference(experiment, tmp_path_factory):
    path = tmp_path_factory.mktemp("reference") / "single.npz"
    assert experiment.run(strategy="single", save_weights=str(path)).ok
    return saved_weights(path)


@pytest.fixture(scope="module")
def trained(experiment, tmp_path_factory):
    """`trained(schedule, stages, micro_batches, **options)`: that pipeline run of `experiment`
    and its trained weights, run once for every test that checks a fact of it (gpipe and 1f1b
    on 4 stages of 4 micro-batches are read by three tests each)."""
    done = {}

    def run(schedule, stages, micro_batches, **options):
        key = (schedule, stages, micro_batches, *sorted(options.items()))
        if key not in done:
            path = tmp_path_factory.mktemp("pipeline") / "model.npz"
            result = experiment.run(
                strategy="pipeline",
                devices=stages,
                schedule=schedule,
                micro_batches=micro_batches,
                save_weights=str(path),
                **options,
            )
            assert result.status == "ok", result.reason
            done[key] = result, saved_weights(path)
        return done[key]

    return run


@pytest.mark.parametrize(("schedule", "stages", "micro_batches"), CASES)
def test_pipeline_matches_single_device(trained, reference, schedule, stages, micro_batches):
    result, weights = trained(schedule, stages, micro_batches)
    diff = largest_difference(weights, reference)
    assert diff <= 1e-5
    assert (result.schedule, result.micro_batches) == (schedule, micro_batches)
    for stage in result.extra["stages"]:
        # Variables and optimizer slots sit on the stage's own device, nowhere else (stage s
        # of an interleaved schedule lives on device s % K).
        assert [d.rsplit("/", 1)[-1] for d in stage["variable_devices"]] == [
            f"device:CPU:{stage['stage'] % stages}"
        ]


def test_timeline_bubble_and_bytes_are_reported(trained):
    result, _ = trained("gpipe", 4, 4)
    timeline = result.timeline
    first_step = timeline[timeline["step"] == 0]
    assert len(first_step) == 4 * 4 * 2  # every stage ran F and B of every micro-batch
    assert (first_step["end"] >= first_step["start"]).all()
    assert set(first_step["kind"]) == {"forward", "backward"}
    assert result.extra["bubble_theoretical"] == pytest.approx(3 / 7)
    assert 0 <= result.extra["bubble_fraction"] < 1
    assert 0 <= result.extra["bubble_simulated"] < 1
    # Cut c carries the micro-batches' activations (16 floats each) and their gradients back.
    assert result.extra["cut_bytes"] == [32 * 16 * 4 * 2] * 3
    assert result.comm_bytes == 3 * 32 * 16 * 4 * 2
    assert len(result.extra["cut_time_s"]) == 3
    assert all(t >= 0 for t in result.extra["cut_time_s"])
    assert result.comm_time_s > 0
    # The engine's own cost, measured beside the work: never negative, and the serial passes'
    # task times hold their calls.
    assert result.extra["task_overhead_s"] >= 0 and result.extra["task_overhead_alone_s"] >= 0
    assert result.extra["outside_tasks_s"] >= 0
    assert 0 < result.extra["calls_alone_s"] <= result.extra["work_alone_s"]
    row = gpk.Comparison([result]).table.iloc[0]
    assert row["task_overhead_s"] == pytest.approx(result.extra["task_overhead_s"])
    assert row["schedule"] == "gpipe" and row["micro_batches"] == 4
    assert row["bubble_theoretical"] == pytest.approx(3 / 7)
    stages = result.stages
    assert list(stages["device"]) == ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]
    assert (stages["busy_s"] > 0).all() and (stages["idle_s"] >= 0).all()
    # Adam keeps two slots per parameter (plus its step counter and learning rate).
    assert (stages["optimizer_bytes"] > 2 * stages["parameter_bytes"]).all()
    per_stage = stages["parameter_bytes"] + stages["optimizer_bytes"]
    state = dict(zip(stages["device"], per_stage, strict=True))
    assert state == result.extra["state_bytes"]
    figure = result.plot_timeline()
    assert len(figure.axes) == 3


def test_1f1b_holds_fewer_micro_batches_than_gpipe(trained):
    live = {}
    for schedule in ("gpipe", "1f1b"):
        result, _ = trained(schedule, 4, 4)
        live[schedule] = [s["peak_live_micro_batches"] for s in result.extra["stages"]]
    assert live == {"gpipe": [4, 4, 4, 4], "1f1b": [4, 3, 2, 1]}


@pytest.mark.parametrize(
    ("schedule", "recompute"),
    [("gpipe", True), ("gpipe", False), ("1f1b", True), ("interleaved", True), ("zb-h1", True)],
)
def test_batch_norm_uses_micro_batch_statistics(tmp_path, schedule, recompute):
    """Updated once per micro-batch, by its forward: never again by a recompute."""
    x, y = builders.small_data()
    exp = gpk.Experiment(
        model=builders.batch_norm_first,
        data=(x, y),
        batch_size=32,
        epochs=1,
        steps_per_epoch=1,
        shuffle=False,
        progress=False,
    )
    path = tmp_path / "bn.npz"
    # Three layers: interleaved runs them as three stages on one device.
    placement = {"devices": 1, "virtual_stages": 3} if schedule == "interleaved" else {"devices": 2}
    result = exp.run(
        strategy="pipeline",
        **placement,
        schedule=schedule,
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
    whole_batch = x[:32].mean(axis=0) * 0.5
    assert not np.allclose(moving_mean, whole_batch, atol=1e-3)


def test_a_model_with_a_skip_connection_is_cut_with_its_skip(tmp_path):
    exp = small_experiment(builders.residual_model, steps_per_epoch=2)
    single, split = tmp_path / "single.npz", tmp_path / "model.npz"
    assert exp.run(strategy="single", save_weights=str(single)).ok
    # Balanced by parameters, the cut falls after the Add, where one tensor crosses; named,
    # the second stage begins at the Add and receives both of its inputs.
    balanced = exp.run(strategy="pipeline", devices=2)
    assert balanced.ok, balanced.reason
    assert [t["tensor"] for t in balanced.extra["stages"][1]["receives"]] == ["add"]
    result = exp.run(strategy="pipeline", devices=2, balance=["add"], save_weights=str(split))
    assert result.ok, result.reason
    assert largest_difference(saved_weights(split), saved_weights(single)) <= 1e-5
    first, second = result.extra["stages"]
    assert first["first_layer"] == first["layers"][0]
    # The model input and the hidden layer's output both cross into the stage with the Add.
    received = [t["tensor"] for t in second["receives"]]
    assert len(received) == 2, received
    assert all(t["bytes_per_sample"] == builders.FEATURES * 4 for t in second["receives"])


def test_fewer_layers_than_stages():
    exp = small_experiment(builders.small_mlp, steps_per_epoch=2)
    result = exp.run(strategy="pipeline", devices=4)
    assert result.status == "failed"
    assert "2 layers, fewer than 4 stages" in result.reason


def test_a_model_over_the_per_device_budget_fits_once_split():
    budget = 3 * 2**19  # 1.5 MiB: under the whole model's 3.2 MiB of states, over a stage's
    exp = small_experiment(builders.wide_mlp, steps_per_epoch=2)
    cmp = exp.compare(["single", "model"], [4], memory_budget=budget)
    single, split = cmp.results
    assert single.status == "oom"
    assert "over the memory_budget of 1.5 MiB per device" in single.reason
    # Every part is counted, activations modelled from one call of the model.
    assert "gradients 0.8" in single.reason and "activations 0." in single.reason
    assert split.status == "ok", split.reason
    table = cmp.table.set_index("strategy")
    assert table.loc["single", "state_bytes"] != table.loc["single", "state_bytes"]  # NaN: failed
    assert table.loc["pipeline", "state_bytes"] <= budget
    assert sum(split.extra["state_bytes"].values()) > budget  # the whole would not have fit


def test_a_pipeline_budget_counts_the_activations_its_schedule_keeps_in_flight():
    exp = small_experiment(builders.wide_mlp, steps_per_epoch=2, batch_size=256)
    plan = dict(schedule="gpipe", micro_batches=4)
    measured = exp.run("pipeline", 2, **plan)
    assert measured.ok, measured.reason
    states, held = {}, {}
    for stage in measured.extra["stages"]:
        device = stage["device"]
        states[device] = states.get(device, 0) + 2 * stage["parameter_bytes"]
        states[device] += stage["optimizer_bytes"]
        held[device] = held.get(device, 0) + stage["activation_bytes_held"]
    # Every device's model states fit; the activations of the 4 micro-batches GPipe keeps in
    # flight do not.
    refused = exp.run("pipeline", 2, **plan, memory_budget=max(states.values()) + 1)
    assert refused.status == "oom"
    assert "activations" in refused.reason and "not known" not in refused.reason
    modelled = refused.extra["refused"]["memory"]["devices"]
    assert {d: parts["activations_bytes"] for d, parts in modelled.items()} == held


def test_a_shared_layer_is_one_sentence_naming_it():
    result = small_experiment(builders.shared_layer_model, steps_per_epoch=2).run(
        strategy="pipeline", devices=2
    )
    assert result.status == "failed"
    assert "'twice'" in result.reason and "shared layer" in result.reason


def test_a_nested_model_is_cut_inside(tmp_path):
    exp = small_experiment(builders.nested_model, steps_per_epoch=2)
    single, split = tmp_path / "single.npz", tmp_path / "model.npz"
    assert exp.run(strategy="single", save_weights=str(single)).ok
    result = exp.run(strategy="pipeline", devices=4, save_weights=str(split))
    assert result.ok, result.reason
    assert largest_difference(saved_weights(split), saved_weights(single)) <= 1e-5
    layers = [name for stage in result.extra["stages"] for name in stage["layers"]]
    assert layers == ["before", "inner/inner_dense", "after", "head"]  # opened, its call named


@pytest.fixture(scope="module")
def trained_without_dropout(tmp_path_factory):
    """The dropout chain's weights with its rate at 0, trained on one device: where every
    schedule's training without dropout ends (each equals one device's, to 1e-5)."""
    path = tmp_path_factory.mktemp("no_dropout") / "single.npz"
    result = small_experiment(
        functools.partial(builders.dropout_chain, rate=0.0), steps_per_epoch=3
    ).run("single", 1, save_weights=str(path))
    assert result.ok, result.reason
    return saved_weights(path)


@pytest.mark.parametrize(
    ("schedule", "stages", "micro_batches"),
    [("gpipe", 2, 4), ("1f1b", 4, 4), ("interleaved", 2, 4), ("zb-h1", 4, 4)],
)
def test_recompute_draws_the_dropout_masks_its_forward_drew(
    tmp_path, trained_without_dropout, schedule, stages, micro_batches
):
    plan = dict(strategy="pipeline", devices=stages, schedule=schedule, micro_batches=micro_batches)
    weights = {}
    for name, recompute in (("eager", False), ("compiled", True)):
        path = tmp_path / f"{name}.npz"
        result = small_experiment(builders.dropout_chain, steps_per_epoch=3).run(
            **plan, recompute=recompute, save_weights=str(path)
        )
        assert result.ok, result.reason
        weights[name] = saved_weights(path)
    # The recompute reproduces the eager forward's masks, so both train the same weights ...
    assert largest_difference(weights["compiled"], weights["eager"]) <= 1e-5
    # ... and the masks matter: without dropout the weights come out elsewhere.
    assert largest_difference(weights["compiled"], trained_without_dropout) > 1e-3


def test_recompute_and_eager_tasks_train_the_same_weights(trained):
    # The default is the compiled tasks: the run test_pipeline_matches_single_device checked.
    compiled, compiled_weights = trained("1f1b", 4, 4)
    eager, eager_weights = trained("1f1b", 4, 4, recompute=False)
    assert compiled.extra["stage_tasks"].startswith("compiled")
    assert eager.extra["stage_tasks"].startswith("eager")
    assert largest_difference(compiled_weights, eager_weights) <= 1e-5


@pytest.fixture(scope="module")
def regularized(tmp_path_factory):
    """The model with an added loss in its first stage, and its run on one device (its weights
    and row), shared by both kinds of stage tasks."""
    experiment = small_experiment(builders.regularized_first_stage, epochs=2, steps_per_epoch=2)
    path = tmp_path_factory.mktemp("regularized") / "single.npz"
    single = experiment.run("single", 1, save_weights=str(path))
    assert single.ok, single.reason
    return experiment, single, saved_weights(path)


@pytest.mark.parametrize("recompute", [False, True], ids=["eager", "compiled"])
def test_a_first_stages_added_loss_is_in_the_reported_loss(regularized, tmp_path, recompute):
    experiment, single, reference = regularized
    path = tmp_path / "pipeline.npz"
    result = experiment.run(
        "pipeline", 2, schedule="1f1b", micro_batches=2, recompute=recompute, save_weights=str(path)
    )
    assert result.ok, result.reason
    assert largest_difference(saved_weights(path), reference) <= 1e-5
    assert result.history["loss"] == pytest.approx(single.history["loss"], abs=1e-5)
