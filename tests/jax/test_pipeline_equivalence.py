"""`pipeline` on JAX (one compiled program per stage pass, in the schedule's order) trains the
weights of single-device training to 1e-5, under every schedule, at 2 and 4 stages, with each
stage's arrays on its own device; and reports its timeline, bubble, bytes and memory as the
TensorFlow engine does.

About 40 s on 2 cores: each run is a JAX worker of 2-4 s, the MLP's reference trained once.
"""

from __future__ import annotations

import json
import pathlib

import pytest

import gpu_parallel_kit as gpk
from tests import builders
from tests.builders import largest_difference, saved_weights

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
# (schedule, devices, micro-batches, recompute): every schedule at 2 and 4 stages (interleaved
# at 2 devices x 2 chunks); the backward kept from the forward once, split once.
CASES = [
    ("naive", 1, 1, True),  # one stage: forward, backward and update in one call
    ("1f1b", 1, 4, False),
    ("naive", 2, 1, True),
    ("naive", 4, 1, True),
    ("gpipe", 2, 4, True),
    ("gpipe", 4, 4, False),
    ("1f1b", 2, 4, False),
    ("1f1b", 4, 4, True),
    ("interleaved", 2, 2, True),
    ("interleaved", 2, 4, True),
    ("zb-h1", 2, 4, False),
    ("zb-h1", 4, 4, True),
]


@pytest.fixture(scope="module")
def experiment():
    return builders.small_experiment(builders.deep_mlp, steps_per_epoch=3, backend="jax")


@pytest.fixture(scope="module")
def reference(experiment, tmp_path_factory):
    path = tmp_path_factory.mktemp("reference") / "single.npz"
    result = experiment.run("single", 1, save_weights=str(path))
    assert result.ok, result.reason
    return saved_weights(path)


@pytest.mark.parametrize(("schedule", "devices", "micro_batches", "recompute"), CASES)
def test_every_schedule_trains_the_weights_of_one_device(
    experiment, reference, tmp_path, schedule, devices, micro_batches, recompute
):
    path = tmp_path / "pipeline.npz"
    result = experiment.run(
        "pipeline",
        devices,
        schedule=schedule,
        micro_batches=micro_batches,
        recompute=recompute,
        save_weights=str(path),
    )
    assert result.ok, result.reason
    assert (result.backend, result.schedule, result.micro_batches) == (
        "jax",
        schedule,
        micro_batches,
    )
    assert largest_difference(saved_weights(path), reference) <= TOLERANCE
    for stage in result.extra["stages"]:
        # Weights, statistics and optimizer state on the stage's own device (stage s of an
        # interleaved schedule on device s % K), nowhere else.
        assert stage["variable_devices"] == [f"/cpu:{stage['stage'] % devices}"]


def test_timeline_bubble_bytes_and_memory_are_reported(experiment, tmp_path):
    result = experiment.run("pipeline", 4, schedule="gpipe", micro_batches=4)
    assert result.ok, result.reason
    first_step = result.timeline[result.timeline["step"] == 0]
    assert len(first_step) == 4 * 4 * 2  # every stage ran F and B of every micro-batch
    assert (first_step["end"] >= first_step["start"]).all()
    assert set(first_step["kind"]) == {"forward", "backward"}
    extra = result.extra
    assert extra["bubble_theoretical"] == pytest.approx(3 / 7)
    assert 0 <= extra["bubble_fraction"] < 1 and 0 <= extra["bubble_simulated"] < 1
    # Cut c carries the micro-batches' activations (16 floats each) and their gradients back.
    assert extra["cut_bytes"] == [32 * 16 * 4 * 2] * 3
    assert result.comm_bytes == sum(extra["cut_bytes"])
    assert result.comm_time_s is not None and result.comm_time_s >= 0
    stages = result.stages
    assert list(stages["device"]) == ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]
    assert (stages["busy_s"] > 0).all() and (stages["idle_s"] >= 0).all()
    # Adam keeps two slots per parameter (plus its step counter and learning rate).
    assert (stages["optimizer_bytes"] > 2 * stages["parameter_bytes"]).all()
    per_stage = stages["parameter_bytes"] + stages["optimizer_bytes"]
    assert dict(zip(stages["device"], per_stage, strict=True)) == extra["state_bytes"]
    memory = extra["memory"]["devices"]
    assert sorted(memory) == ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]
    assert all(parts["activations_bytes"] > 0 for parts in memory.values())
    assert len(result.plot_timeline().axes) == 3
    trace = json.loads(pathlib.Path(result.save_trace(str(tmp_path / "run.json"))).read_text())
    kinds = {event.get("cat") for event in trace["traceEvents"]}
    assert {"forward", "backward", "communication"} <= kinds  # tasks, and copies across cuts
    row = gpk.Comparison([result]).table.iloc[0]
    assert row["schedule"] == "gpipe" and row["bubble_theoretical"] == pytest.approx(3 / 7)


def test_auto_chooses_m_from_the_curve_measured_on_jax(experiment, reference, tmp_path):
    path = tmp_path / "auto.npz"
    result = experiment.run(
        "pipeline", 4, schedule="zb-h1", micro_batches="auto", save_weights=str(path)
    )
    assert result.ok, result.reason
    choice = result.extra["microbatch_choice"]
    assert choice["auto"] and result.micro_batches == choice["micro_batches"]
    sizes = {point["size"] for point in result.extra["microbatch_curve"]["points"]}
    assert result.global_batch in sizes and len(sizes) > 1  # the whole batch and M's shares
    # Whichever M it chose, the gradients are the global batch's: one device's weights.
    assert largest_difference(saved_weights(path), reference) <= TOLERANCE


def test_one_comparison_holds_both_backends_pipelines(experiment):
    cmp = experiment.compare(
        ["pipeline"], [2], backend=["tensorflow", "jax"], schedule="1f1b", micro_batches=4
    )
    table = cmp.table
    assert sorted(table["backend"]) == ["jax", "tensorflow"]
    assert (table["status"] == "ok").all(), list(table["reason"])
    # The same cut on both backends: the same bytes cross it, the same bubble is predicted.
    assert table["comm_bytes"].nunique() == 1 and table["bubble_theoretical"].nunique() == 1
    assert table["bubble_fraction"].notna().all()
