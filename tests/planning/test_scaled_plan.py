"""A searched plan's shape scaled to run here (`planning/scaled_plan.py`): every kind of plan, every
refusal, all on plain values."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster
from gpu_parallel_kit.analysis.cost_model.parallel_plan import SHARDINGS, Plan
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.planning import plans_of
from gpu_parallel_kit.planning.plan_runs import plan_rows
from gpu_parallel_kit.planning.scaled_plan import scale_plan
from gpu_parallel_kit.strategies import runnable, strategy_record

from .conftest import gpt_card

REPLICAS = Plan(16, 1, 1, "none", 1, 32, "-", 1, "none")
PIPELINE = next(r for r in runnable() if r.plan_axis == "stages")
MESHED = "mesh" in PIPELINE.option_names()  # stages on (data, tensor) sub-meshes


def plan(**changes):
    return dataclasses.asdict(dataclasses.replace(REPLICAS, **changes))


def scaled(devices=8, batch=16, backend="jax", model_blocks=12, heads=8, **changes):
    return scale_plan(plan(**changes), devices, batch, backend, model_blocks, heads)


def record_of(shape):
    return strategy_record(shape.strategy)


def test_replicas_run_as_fewer_replicas_and_say_what_changed():
    shape = scaled()
    assert record_of(shape).plan_axis == "data" and not record_of(shape).splits_state
    assert shape.devices == 8 and shape.shape["data"] == 8
    assert shape.shape["micro_batch_size"] * shape.shape["data"] == 16
    assert shape.scaled[:2] == ("data 16 -> 8", "global batch 512 -> 16")
    assert "accumulation 32 -> 1" in shape.scaled and shape.blocks == 2
    assert shape.said.endswith("blocks 12 -> 2")


@pytest.mark.parametrize("sharding", [s for s in SHARDINGS if s != "none"])
def test_a_sharding_runs_on_the_record_that_trains_it_else_as_replicas(sharding):
    shape = scaled(sharding=sharding)
    trains = [r for r in runnable() if r.plan_sharding == sharding]
    if trains:
        assert shape.strategy == trains[0].name and shape.shape["sharding"] == sharding
        assert shape.options["mesh"] == (8, 1)
    else:
        assert not record_of(shape).splits_state and shape.shape["sharding"] == "none"
        assert f"{sharding} run as replicated" in shape.scaled


def test_a_tensor_plan_keeps_its_tensor_on_a_data_by_model_mesh():
    shape = scaled(tensor=2, sharding="zero-1")
    assert record_of(shape).plan_axis == "tensor"
    assert shape.options == {"mesh": (4, 2)} and shape.devices == 8
    assert (shape.shape["data"], shape.shape["tensor"]) == (4, 2)
    assert "zero-1 run as replicated" in shape.scaled


def test_fsdp_with_tensor_is_hybrid_sharding():
    shape = scaled(tensor=4, sharding="fsdp")
    assert record_of(shape).plan_sharding == "fsdp" and shape.options["mesh"] == (2, 4)


def test_a_tensor_the_devices_cannot_hold_is_scaled_down():
    shape = scaled(devices=4, tensor=8)
    assert shape.shape["tensor"] == 4 and shape.options["mesh"] == (1, 4)
    assert "tensor 8 -> 4" in shape.scaled


def test_a_strategy_the_backend_lacks_runs_on_one_that_has_it():
    shape = scaled(backend="tensorflow", tensor=2)
    assert record_of(shape).offered_on(shape.backend) and shape.backend != "tensorflow"
    assert f"backend tensorflow -> {shape.backend}" in shape.scaled


def test_a_pipeline_keeps_its_stages_schedule_and_chunks():
    shape = scaled(stages=2, schedule="interleaved", virtual_stages=2, micro_batches=8,
                   checkpointing="full", sharding="zero-1")  # fmt: skip
    data = shape.shape["data"]
    assert record_of(shape).plan_axis == "stages" and shape.devices == 2 * data
    assert data == (4 if MESHED else 1)  # replicas only where stages take a mesh
    assert shape.options.get("mesh") == ((data, 1) if data > 1 else None)
    assert {k: shape.options[k] for k in ("schedule", "virtual_stages", "recompute")} == {
        "schedule": "interleaved",
        "virtual_stages": 2,
        "recompute": True,
    }
    assert shape.options["micro_batches"] == min(8, 16 // data)  # as many as a replica holds
    assert data * shape.shape["micro_batches"] * shape.shape["micro_batch_size"] == 16
    assert shape.blocks == 4  # two stages of two chunks each
    assert "zero-1 run as replicated" in shape.scaled


def test_a_pipelines_micro_batches_fit_the_batch_here_and_its_schedule():
    shape = scaled(batch=12, stages=4, schedule="1f1b", micro_batches=64)
    replica = 12 // shape.shape["data"]
    assert shape.options["micro_batches"] == replica and shape.options["recompute"] is False
    assert f"micro-batches 64 -> {replica}" in shape.scaled
    # interleaved takes multiples of its 4 stages: fewer replicas, so that one divides the batch
    interleaved = scaled(batch=12, stages=4, schedule="interleaved", virtual_stages=2,
                         micro_batches=64)  # fmt: skip
    assert interleaved.options["micro_batches"] % 4 == 0
    assert 12 % (interleaved.options["micro_batches"] * interleaved.shape["data"]) == 0


def test_tensor_with_stages_waits_for_a_pipeline_on_sub_meshes():
    three_d = dict(tensor=2, stages=2, schedule="1f1b", micro_batches=8)
    if not MESHED:
        with pytest.raises(GpkError, match="tensor 2 × stages 2 needs a pipeline") as refused:
            scaled(**three_d)
        assert "plans.fitting.query('tensor == 1 or stages == 1')" in str(refused.value)
        return
    shape = scaled(**three_d)
    data = shape.shape["data"]
    assert record_of(shape).plan_axis == "stages" and shape.options["mesh"] == (data, 2)
    assert shape.devices == data * 2 * 2 <= 8
    moved = scaled(backend="tensorflow", **three_d)  # which splits no layers over a mesh
    assert moved.backend == "jax" and "backend tensorflow -> jax" in moved.scaled


def test_a_pipeline_on_a_backend_that_splits_no_layers_keeps_it_with_one_replica():
    shape = scaled(backend="tensorflow", stages=2, schedule="1f1b", micro_batches=8)
    assert shape.backend == "tensorflow" and shape.shape["data"] == 1
    assert "mesh" not in shape.options and shape.devices == 2


def test_one_replica_on_one_device_is_the_baseline_and_checkpointing_is_said():
    shape = scaled(data=1, checkpointing="full")
    assert record_of(shape).baseline and shape.devices == 1
    assert "checkpointing full -> none" in shape.scaled


def test_a_model_the_kit_cannot_rebuild_runs_as_it_is():
    shape = scaled(model_blocks=None)
    assert shape.blocks is None and "model as it is" in shape.said
    assert scaled(model_blocks=2).blocks is None  # already as small: nothing to rebuild
    given = scale_plan(plan(stages=2, schedule="1f1b", micro_batches=4), 8, 16, "jax", 12,
                       blocks=6)  # fmt: skip
    assert given.blocks == 6 and "blocks 12 -> 6" in given.scaled


@pytest.mark.parametrize(
    "changes, arguments, words",
    [
        ({"tensor": 8}, {"heads": 12}, "does not divide the model's 12 attention heads"),
        ({"stages": 4, "schedule": "interleaved", "virtual_stages": 2, "micro_batches": 8},
         {"batch": 6}, "splits into no micro-batch count"),
        ({"stages": 2, "schedule": "1f1b", "micro_batches": 4}, {"blocks": 3},
         "does not split over 2 stage chunks"),
        ({}, {"model_blocks": None, "blocks": 4}, "keras-hub backbone only"),
    ],
)  # fmt: skip
def test_what_cannot_run_here_is_refused_in_one_sentence(changes, arguments, words):
    given = dict(devices=8, batch=16, backend="jax", model_blocks=12, heads=8) | arguments
    blocks = given.pop("blocks", None)
    with pytest.raises(GpkError, match=words) as refused:
        scale_plan(plan(**changes), blocks=blocks, **given)
    assert re.search(r"\.\s+[A-Z]", str(refused.value)) is None  # one sentence


def test_a_plan_that_lacks_a_field_is_refused():
    with pytest.raises(GpkError, match="the plan has no tensor"):
        scale_plan({"data": 2}, 8, 16, "jax")


def test_every_kind_of_plan_the_search_gives_is_read():
    found = plans_of(gpt_card(), GPUCluster("a100", nodes=2, per_node=8), 64, name="gpt")
    rows = plan_rows(found.table.head(40)) + plan_rows(found.best)
    assert len(rows) == 41
    for row in rows:
        try:
            shape = scale_plan(row, 8, 16, "jax", model_blocks=32, heads=32)
        except GpkError as refused:
            assert "needs a pipeline whose stages split" in str(refused)
            continue
        axes = shape.shape["data"] * shape.shape["tensor"] * shape.shape["stages"]
        assert axes == shape.devices <= 8
        assert int(getattr(row, "row", row)["tensor"]) % shape.shape["tensor"] == 0
    with pytest.raises(GpkError, match="no plan to run"):
        plan_rows(found.table.head(0))
    assert len(plan_rows([found.table.head(2), found.best])) == 3  # a list's tables opened
    with pytest.raises(GpkError, match="is not a plan"):
        plan_rows([found.best, "1f1b"])


def test_context_sequence_parallelism_and_selective_recomputation_run_as_planned():
    import pandas as pd

    row = pd.Series(plan(data=8, tensor=4, checkpointing="selective", sequence_parallel=True,
                         attention="flash"))  # fmt: skip
    shape = scale_plan(row, 8, 16, "tensorflow", 12, 8)
    assert (shape.strategy, shape.backend) == ("tensor", "jax")  # the options are JAX's
    assert shape.options == {"mesh": (2, 4), "sequence_parallel": True,
                             "checkpointing": "selective"}  # fmt: skip
    assert shape.shape["sequence_parallel"] is True and shape.shape["checkpointing"] == "selective"
    assert not any("sequence parallel" in s or "checkpointing" in s for s in shape.scaled)
    # A context axis takes its devices before the replicas do.
    long = scale_plan(plan(data=8, tensor=4, context=2), 8, 16, "jax", 12, 8)
    assert long.options == {"mesh": (2, 4), "context": 2} and long.shape["context"] == 2
    assert long.devices == 8 and not any(s.startswith("context") for s in long.scaled)
    alone = scale_plan(plan(data=4, context=4, sharding="fsdp"), 8, 16, "jax", 12, 8)
    assert (alone.strategy, alone.options["context"], alone.devices) == ("fsdp", 4, 8)
    # Sequence parallelism beside a context axis: the norms over context × model, both run.
    both = scale_plan(plan(data=8, tensor=4, context=2, sequence_parallel=True), 8, 16, "jax",
                      12, 8)  # fmt: skip
    assert both.options == {"mesh": (2, 4), "context": 2, "sequence_parallel": True}
    assert not any("sequence parallel" in s or "context" in s for s in both.scaled)
    # Pipeline stages on tensor sub-meshes split their norms too.
    staged = scale_plan(plan(data=1, tensor=2, stages=2, micro_batches=4, schedule="1f1b",
                             sequence_parallel=True), 4, 16, "jax", 12, 8)  # fmt: skip
    assert staged.strategy == "pipeline" and staged.options["sequence_parallel"] is True
    assert staged.options["mesh"] == (1, 2) and staged.shape["sequence_parallel"] is True
    assert not any("sequence parallel" in s for s in staged.scaled)
    # What the devices here cannot hold is said.
    few = scale_plan(plan(data=8, tensor=4, context=4), 4, 16, "jax", 12, 8)
    assert "context 4 -> 1" in few.scaled and few.shape["context"] == 1
    # A plan written before these fields took defaults is read with the defaults.
    old = {k: v for k, v in plan().items() if k not in ("attention", "context", "stage_blocks")}
    assert scale_plan(old, 8, 16, "jax", 12, 8).shape["context"] == 1


def test_a_plans_expert_axis_runs_as_expert_on_a_data_by_expert_mesh():
    shape = scale_plan(plan(data=8, expert=4, sharding="zero-1"), 8, 16, "tensorflow", 12, 8)
    assert (shape.strategy, shape.backend, shape.devices) == ("expert", "jax", 8)
    assert shape.options["mesh"] == (2, 4) and shape.shape["expert"] == 4
    assert "zero-1 run as replicated" in shape.scaled
    # Four devices here keep as much of the expert axis as the replicas here hold.
    fewer = scale_plan(plan(data=16, expert=8), 4, 16, "jax", 12, 8)
    assert fewer.options["mesh"] == (1, 4) and "expert 8 -> 4" in fewer.scaled


def test_beside_a_tensor_axis_the_experts_stay_whole():
    shape = scale_plan(plan(data=4, tensor=2, expert=4), 8, 16, "jax", 12, 8)
    assert shape.strategy == "tensor" and shape.shape["expert"] == 1
    assert "expert 4 -> 1" in shape.scaled
    # A plan written before the expert axis reads as one of 1.
    old = {k: v for k, v in plan().items() if k != "expert"}
    assert scale_plan(old, 8, 16, "jax", 12, 8).shape["expert"] == 1
