"""The long-sequence options' bad values are one sentence each before any work
(`strategies/long_sequences.py`)."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk


@pytest.fixture(scope="module")
def experiment():
    return gpk.Experiment(model="transformer", backend="jax", progress=False)


@pytest.mark.parametrize(
    ("strategy", "devices", "options", "said"),
    [
        ("data", 2, dict(sequence_parallel=True), "give a model axis of 2 or more"),
        ("pipeline", 4, dict(sequence_parallel=True), "a pipeline's mesh=\\(1, 2\\)"),
        ("data", 4, dict(context=3), "context=3 does not divide the data axis's 4 devices"),
        ("data", 3, dict(context=2, workers=2), "context=2 over 2 workers of 3 devices each"),
    ],
)
def test_a_bad_long_sequence_option_is_one_sentence(experiment, strategy, devices, options, said):
    with pytest.raises(gpk.GpkError, match=said):
        experiment.plan(strategy, devices, **options)


def test_pipeline_stages_on_a_tensor_mesh_take_sequence_parallelism(experiment):
    spec = experiment.plan("pipeline", 4, mesh=(1, 2), sequence_parallel=True)
    assert spec.options["sequence_parallel"] is True and spec.options["stages"] == 2
