"""A one-stage pipeline runs several steps in one call, as `fit` does with steps_per_execution.

With one stage on one device and one micro-batch there is nothing to pipeline: each step is the
stage's forward, backward and update in one call, and tune gives the run the steps per
execution it gives `single`, so the two runtimes' own costs per step are alike. The steps run
together must still train the weights one device trains, on both backends.
"""

from __future__ import annotations

import pytest

from tests import builders
from tests.builders import largest_difference, saved_weights

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_steps_run_together_train_the_weights_of_one_device(backend, tmp_path):
    # 16 steps: tune's rule leaves 4 or more timed executions of several steps each.
    experiment = builders.small_experiment(
        builders.deep_mlp, steps_per_epoch=16, backend=backend, measure_comm=False
    )
    paths = {name: tmp_path / f"{name}.npz" for name in ("single", "pipeline")}
    single = experiment.run("single", 1, save_weights=str(paths["single"]))
    pipeline = experiment.run("pipeline", 1, schedule="naive", save_weights=str(paths["pipeline"]))
    assert single.ok and pipeline.ok, (single.reason, pipeline.reason)
    together = pipeline.extra["tuned"]["steps_per_execution"]
    assert together > 1
    assert together == single.extra["tuned"]["steps_per_execution"]
    assert pipeline.extra["steps_per_call"] == together
    difference = largest_difference(
        saved_weights(paths["pipeline"]), saved_weights(paths["single"])
    )
    assert difference <= 1e-5
    assert pipeline.history["loss"] == pytest.approx(single.history["loss"], abs=1e-5)


def test_a_pipeline_of_several_stages_runs_its_steps_one_by_one():
    experiment = builders.small_experiment(
        builders.deep_mlp, steps_per_epoch=16, backend="jax", measure_comm=False
    )
    result = experiment.run("pipeline", 2, schedule="naive")
    assert result.ok, result.reason
    assert result.extra["tuned"]["steps_per_execution"] == 1
    assert result.extra["steps_per_call"] == 1
