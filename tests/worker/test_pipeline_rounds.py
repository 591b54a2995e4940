"""A comparison's later rounds of a pipeline train in the first round's process, as `fit`'s do.

Each round after the first puts every stage back as the first round found it (weights, optimizer
state, gradient sums) and trains the same batches again, already traced: with
`deterministic=True` every round gives the first one's loss curve, and each round's row carries
its own timeline and step times.
"""

from __future__ import annotations

import pytest

from tests import builders

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_later_rounds_of_a_pipeline_train_in_the_first_rounds_process(backend, tmp_path):
    from gpu_parallel_kit.store import RunLog

    log = str(tmp_path / "runs.sqlite")
    experiment = builders.small_experiment(
        builders.deep_mlp, steps_per_epoch=8, backend=backend, deterministic=True, log=log
    )
    experiment.compare(["pipeline"], [2], schedule="gpipe", micro_batches=2, rounds=3)
    first, *later = RunLog(log).results()
    assert len(later) == 2
    for row in (first, *later):
        assert row.ok, row.reason
        assert row.extra["timeline"] and row.step_times_s
    assert "trained_in_process_of" not in first.extra
    for row in later:
        assert row.extra["trained_in_process_of"] == first.run_id
        # Put back as the first round found them: the same batches give the same curve.
        assert row.history["loss"] == first.history["loss"]
        assert len(row.step_times_s) == len(first.step_times_s)
