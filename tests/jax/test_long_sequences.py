"""Context parallelism, sequence parallelism and recomputation on JAX train the weights one
device trains, to 1e-5, on keras-hub's Llama 3 built tiny at 256 tokens a sample
(`strategies/long_sequences.py`, `worker/jax/sequence_split.py`)."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

import gpu_parallel_kit as gpk
from tests.builders import largest_difference, runs_side_by_side, saved_weights
from tests.hub_models import llama3_long, long_tokens

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
PLANS = {
    "context-2": dict(strategy="data", devices=2, context=2),
    "context-4": dict(strategy="data", devices=4, context=4),
    "data-2-context-2": dict(strategy="data", devices=4, context=2),
    "tensor-2-sequence-parallel": dict(strategy="tensor", devices=2, sequence_parallel=True),
    "tensor-2x2-context-2": dict(strategy="tensor", devices=4, mesh=(2, 2), context=2),
    "tensor-2x2-context-2-sequence-parallel": dict(
        strategy="tensor", devices=4, mesh=(2, 2), context=2, sequence_parallel=True
    ),
    "selective": dict(strategy="data", devices=2, checkpointing="selective"),
    "fsdp-2-context-2": dict(strategy="fsdp", devices=2, context=2, min_shard_bytes=0),
    # Over processes: each worker feeds its chunk of each sequence (the context axis spans them).
    "context-2-workers-2": dict(strategy="data", devices=1, workers=2, context=2),
    "tensor-2x2-context-2-sequence-parallel-workers-2": dict(
        strategy="tensor", devices=2, workers=2, mesh=(2, 2), context=2, sequence_parallel=True
    ),
}


@pytest.fixture(scope="module")
def trained_alone(tmp_path_factory):
    experiment = gpk.Experiment(
        llama3_long,
        long_tokens(),
        batch_size=8,
        steps_per_epoch=3,
        backend="jax",
        progress=False,
        measure_comm=False,
    )
    # The plans in one process each start beside the single run, two at a time
    # (`builders.runs_side_by_side`); those over several processes run in their own test, alone.
    plans = {"single": dict(strategy="single", devices=1)}
    plans |= {plan: s for plan, s in PLANS.items() if "workers" not in s}
    runs = runs_side_by_side(experiment, tmp_path_factory.mktemp("alone"), plans)
    result, path = runs.pop("single").result()
    assert result.ok, result.reason
    return experiment, saved_weights(path), runs


@pytest.mark.parametrize("plan", list(PLANS))
def test_a_long_sequence_option_trains_the_weights_of_one_device(trained_alone, plan, tmp_path):
    experiment, reference, runs = trained_alone
    if plan in runs:
        result, path = runs[plan].result()
    else:
        path = tmp_path / f"{plan}.npz"
        result = experiment.run(**PLANS[plan], save_weights=str(path))
    assert result.ok, f"{plan}: {result.reason}"
    assert largest_difference(saved_weights(path), reference) <= TOLERANCE, plan
    options = PLANS[plan]
    assert len(result.device_names) == options["devices"] * options.get("workers", 1)  # as asked
    # The options did what they say, and the row says so.
    done = result.extra["sequence_split"]
    assert done["context"] == options.get("context", 1)
    if options.get("context", 1) > 1 or options.get("sequence_parallel"):
        assert done["activation_layouts"] >= 2  # each of the two blocks, or their norms
    wanted = options.get("checkpointing", "none")
    assert (done["recomputed_layers"] == 2) == (wanted != "none")  # two attention layers
    assert done["step_temporaries_bytes"] > 0
    assert done["kept_activation_bytes"] > 0  # measured after the forward ran
    assert done["counted_activation_bytes"] > 0  # the search's card, for the same plan
    # A context axis's gathers of keys and values are in the communication columns.
    assert (result.extra.get("context_bytes", 0) > 0) == (options.get("context", 1) > 1)


def test_a_context_axis_collectives_are_measured_beside_their_counted_bytes(trained_alone):
    """The step's activations carry the context axis's layout, so a data run's exposed
    all-reduce cannot be taken per device: its collectives are timed alone instead."""
    experiment, _, _ = trained_alone
    result = experiment.run("data", 2, context=2, measure_comm=True)
    assert result.ok, result.reason
    assert result.extra["standalone_collectives_s"] > 0  # below its noise, comm_time_s is blank
    assert result.extra["comm_method"].startswith("standalone: each block's keys and values")
    assert result.comm_bytes == result.extra["gradient_bytes"] + result.extra["context_bytes"]


def test_sequence_parallelisms_collectives_are_timed_as_the_pair_they_are(trained_alone):
    """Each tensor-parallel sum becomes a reduce-scatter and an all-gather: timed so, alone."""
    experiment, _, _ = trained_alone
    result = experiment.run("tensor", 2, sequence_parallel=True, measure_comm=True)
    assert result.ok, result.reason
    assert result.extra["standalone_collectives_s"] > 0
    assert "each sum a reduce-scatter and an all-gather" in result.extra["comm_method"]


@pytest.mark.parametrize(
    "options",
    [
        dict(mesh=(2, 2), context=2),
        dict(mesh=(2, 2), context=2, experts="dispatched", capacity_factor=8.0),
        dict(mesh=(1, 2), checkpointing="selective"),
        dict(mesh=(1, 2), sequence_parallel=True),
    ],
    ids=["dense-context-2", "dispatched-context-2", "selective", "sequence-parallel"],
)
def test_experts_take_the_long_sequence_options(options, tmp_path):
    """A tiny Mixtral's experts over the expert axis, with a context axis or recomputation:
    one device's weights (dispatched with room for every token, so none is dropped)."""
    from tests.moe_models import BUILDERS, moe_tokens

    experiment = gpk.Experiment(
        BUILDERS["mixtral"], moe_tokens(family="mixtral"), batch_size=16, steps_per_epoch=2,
        backend="jax", progress=False, measure_comm=False,
    )  # fmt: skip
    paths = {name: tmp_path / f"{name}.npz" for name in ("single", "expert")}
    alone = experiment.run("single", 1, save_weights=str(paths["single"]))
    devices = options["mesh"][0] * options["mesh"][1]
    result = experiment.run("expert", devices, save_weights=str(paths["expert"]), **options)
    assert alone.ok and result.ok, (alone.reason, result.reason)
    assert largest_difference(saved_weights(paths["expert"]), saved_weights(paths["single"])) <= (
        TOLERANCE
    )
    done = result.extra["sequence_split"]
    assert done["context"] == options.get("context", 1)
    assert (done["recomputed_layers"] > 0) == ("checkpointing" in options)


def test_pipeline_stages_with_tensor_and_sequence_parallelism_train_one_devices_weights(
    trained_alone, tmp_path
):
    """Two stages, each on a tensor 2 sub-mesh whose blocks' norms split along the sequence:
    the stages trace their layers under their own activation layouts."""
    experiment, reference, _ = trained_alone
    path = tmp_path / "pipeline.npz"
    result = experiment.run(
        "pipeline", 4, mesh=(1, 2), schedule="gpipe", micro_batches=2,
        sequence_parallel=True, save_weights=str(path),
    )  # fmt: skip
    assert result.ok, result.reason
    assert largest_difference(saved_weights(path), reference) <= TOLERANCE
    done = result.extra["sequence_split"]
    assert done["sequence_parallel"] and done["activation_layouts"] >= 2
    assert [len(stage["devices"]) for stage in result.extra["stages"]] == [2, 2]


def test_a_context_axis_holds_fewer_temporaries_on_each_device(tmp_path):
    """`benchmarks/long_sequences.py` at one global batch: each doubling of the context axis
    leaves each device fewer temporaries (XLA's memory analysis of the compiled step) and fewer
    activations kept for the backward (measured); recomputation adds FLOPs and keeps less."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "long.json"
    script = pathlib.Path(__file__).parents[2] / "benchmarks" / "long_sequences.py"
    done = subprocess.run(
        [sys.executable, str(script), "--sequence", "512", "--json", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "XLA_FLAGS": ""},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {(r["context"], r["checkpointing"]): r for r in json.loads(out.read_text())}
    memory = [rows[(c, "none")]["temporaries_mb"] for c in (1, 2, 4)]
    assert memory[0] > memory[1] > memory[2]
    flops = [rows[(1, c)]["gflops_per_device"] for c in ("none", "selective", "full")]
    assert flops[0] < flops[1] < flops[2]
    # What the forward keeps for the backward, measured: less with each doubling of the
    # context axis, and selective recomputation between none and full; the card counts too.
    kept = [rows[(c, "none")]["kept_mb"] for c in (1, 2, 4)]
    assert kept[0] > kept[1] > kept[2] > 0
    recomputed = [rows[(1, c)]["kept_mb"] for c in ("none", "selective", "full")]
    assert recomputed[0] > recomputed[1] > recomputed[2] > 0
    assert all(row["counted_mb"] > 0 for row in rows.values())


@pytest.mark.parametrize(
    "searched",
    [
        dict(data=4, tensor=2, context=2, checkpointing="full", sharding="none"),
        dict(data=2, tensor=2, context=2, sequence_parallel=True, sharding="none"),
    ],
    ids=["tensor-context-full", "tensor-context-sequence-parallel"],
)
def test_a_searched_plans_long_sequence_options_run_as_planned(trained_alone, searched):
    """`run_plan` runs the plan's context, sequence parallelism and recomputation: the row
    says what ran, and `scaled` names none of them."""
    from gpu_parallel_kit.analysis.cost_model.parallel_plan import Plan

    experiment, _, _ = trained_alone
    fields = dict(stages=1, micro_batch_size=2, micro_batches=1, schedule="-",
                  virtual_stages=1, checkpointing="none") | searched  # fmt: skip
    plan = dataclasses.asdict(Plan(**fields))
    ran = experiment.run_plan(plan, devices=4, blocks=2)
    (result,) = ran.results
    assert result.ok, result.reason
    done = result.extra["sequence_split"]
    assert done["context"] == searched.get("context", 1)
    assert done["sequence_parallel"] == searched.get("sequence_parallel", False)
    assert done["checkpointing"] == searched.get("checkpointing", "none")
    said = ran.table.iloc[0]["scaled"]
    assert not any(word in said for word in ("context", "sequence parallel", "checkpointing"))
