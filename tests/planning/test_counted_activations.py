"""A run given long-sequence options, as the plan search's plan of it: the card's count set
beside the activations the run measured (`planning/counted_activations.py`). No process runs."""

from __future__ import annotations

import dataclasses

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.planning.counted_activations import run_as_plan, with_counted_activations
from gpu_parallel_kit.runs.results.run_result import RunResult


@pytest.fixture(scope="module")
def experiment():
    return gpk.Experiment(model="transformer", backend="jax", batch_size=8, progress=False)


@pytest.mark.parametrize(
    ("strategy", "devices", "options", "expected"),
    [
        ("data", 4, dict(context=2), dict(data=2, tensor=1, stages=1, context=2, mbs=4)),
        (
            "tensor", 4, dict(mesh=(2, 2), context=2, sequence_parallel=True),
            dict(data=1, tensor=2, stages=1, context=2, mbs=8),
        ),
        (
            "pipeline", 4, dict(mesh=(1, 2), micro_batches=2, sequence_parallel=True),
            dict(data=1, tensor=2, stages=2, context=1, mbs=4),
        ),
        ("data", 2, dict(checkpointing="selective"), dict(data=2, tensor=1, stages=1, mbs=4)),
    ],
)  # fmt: skip
def test_a_run_is_the_plan_the_search_counts(experiment, strategy, devices, options, expected):
    plan = run_as_plan(experiment.plan(strategy, devices, **options))
    assert (plan.data, plan.tensor, plan.stages) == (
        expected["data"], expected["tensor"], expected["stages"]
    )  # fmt: skip
    assert plan.context == expected.get("context", 1)
    assert plan.micro_batch_size == expected["mbs"]
    assert plan.sequence_parallel == options.get("sequence_parallel", False)
    assert plan.checkpointing == options.get("checkpointing", "none")


def test_each_long_sequence_row_gets_the_cards_count_and_others_are_left(experiment):
    spec = experiment.plan("data", 4, context=2)
    other = experiment.plan("data", 2)
    split = {"context": 2, "sequence_parallel": False, "checkpointing": "none"}

    def row(of, extra):
        identity = of.result_identity()
        return RunResult(**{**identity, "status": "ok", "extra": extra})

    rows = [row(spec, {"sequence_split": split}), row(other, {})]
    calls = []

    def card():
        calls.append(1)
        raise gpk.GpkError("the model could not be counted")

    done = with_counted_activations(rows, [spec, other], card)
    assert done[0].extra["sequence_split"]["counted_activation_reason"].startswith("the model")
    assert done[1] is rows[1] and len(calls) == 1
    assert dataclasses.replace(done[0], extra=rows[0].extra) == rows[0]
