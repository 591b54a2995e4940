"""A searched plan's shape run here (`planning/plan_runs.py`): one real run of a tiny keras-hub
GPT-2 on JAX, its depth read in a child and rebuilt with fewer blocks, and the refusals, said
before any work."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.analysis.cost_model.parallel_plan import Plan
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.planning import plan_runs
from tests import hub_models

TENSOR_PLAN = Plan(8, 2, 1, "zero-1", 2, 4, "-", 1, "none")


@pytest.fixture
def gpt2_read(monkeypatch):
    """The child that reads the experiment's model replaced by what it says of
    `hub_models.gpt2` (two blocks, two heads); the models it was asked about."""
    calls = []

    def read(source, backend):
        calls.append(source.name)
        return 2, 2

    monkeypatch.setattr(plan_runs, "read_depth", read)
    monkeypatch.setattr(plan_runs, "_DEPTHS", {})
    return calls


def gpt2_experiment(**options):
    return gpk.Experiment(
        model=hub_models.gpt2,
        data=hub_models.tokens("gpt2", samples=32),
        batch_size=8,
        steps_per_epoch=3,
        backend="jax",
        measure_comm=False,
        progress=False,
        **options,
    )


@pytest.mark.slow  # about 15 s on two cores: the JAX server, the model read, one tensor run
def test_a_tensor_plan_runs_scaled_down_and_its_row_says_so():
    plan = dataclasses.asdict(TENSOR_PLAN)
    ran = gpt2_experiment().run_plan(plan, devices=4, blocks=1)
    (result,) = ran.results
    assert result.ok, result.reason
    assert result.strategy == "tensor" and result.devices == 4 and result.mesh == "2x2"
    row = ran.table.iloc[0]
    assert (row["data"], row["tensor"], row["stages"]) == (2, 2, 1)
    assert row["sharding"] == "none" and row["micro_batch_size"] == 4
    said = row["scaled"].split("; ")
    assert said[:2] == ["data 8 -> 2", "global batch 64 -> 8"]
    assert "zero-1 run as replicated" in said and said[-1] == "blocks 2 -> 1"


def test_a_plan_that_cannot_run_here_is_refused_before_any_run(gpt2_read, fake_machine):
    # Three stages of interleaved chunks take multiples of 3 micro-batches; the batch is 8.
    three_stages = Plan(1, 1, 3, "none", 1, 6, "interleaved", 2, "none")
    plans = [dataclasses.asdict(TENSOR_PLAN), dataclasses.asdict(three_stages)]
    with pytest.raises(GpkError, match="splits into no micro-batch count"):
        gpt2_experiment().compare_plans(plans, devices=4)
    assert fake_machine.specs == [] and gpt2_read == []  # not even the model read


def test_run_plan_takes_one_plan_a_one_row_table_too(gpt2_read, fake_machine):
    table = pd.DataFrame([dataclasses.asdict(TENSOR_PLAN)] * 2)
    with pytest.raises(GpkError, match="run_plan runs one plan and was given 2"):
        gpt2_experiment().run_plan(table, devices=4)
    ran = gpt2_experiment().run_plan(table.head(1), devices=4)
    assert len(ran.results) == 1 and fake_machine.specs[0].mesh == (2, 2)


def test_compare_plans_runs_each_plan_and_tables_their_shapes(gpt2_read, fake_machine):
    pipelined = Plan(4, 1, 2, "none", 1, 8, "1f1b", 1, "full")
    plans = [dataclasses.asdict(TENSOR_PLAN), dataclasses.asdict(pipelined)]
    compared = gpt2_experiment().compare_plans(plans, devices=4)
    tensor, pipeline = fake_machine.specs
    assert tensor.mesh == (2, 2) and "blocks)" not in tensor.model.name  # already two
    table = compared.table
    data = table["data"].iloc[1]  # a pipeline's replicas: where its stages take a mesh
    assert pipeline.devices.count == 2 * data and pipeline.recompute
    assert pipeline.micro_batches == 8 // data
    assert list(table["stages"]) == [1, 2] and table["data"].iloc[0] == 2
    assert table.columns.get_loc("scaled") > table.columns.get_loc("devices")
    assert all(isinstance(text, str) and text for text in table["scaled"])
    assert len(gpt2_read) == 1  # the model read once for both plans
    logged = gpk.history()  # the rows were logged with their plans
    for column in ("data", "tensor", "stages", "sharding", "checkpointing", "scaled"):
        assert list(logged[column]) == list(table[column]), column
