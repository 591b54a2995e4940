"""Both backends' pipeline rows carry the same columns and views for the same options.

One runtime (`worker/pipeline/schedule_runner.py`) runs both backends' stages, so a TensorFlow and
a JAX run of the same schedule fill the same row fields and the same `extra` keys: the timeline,
the simulated view of the tasks timed alone, the bubble, the bytes across each cut, the
micro-batch curve. `measure_comm=False` skips the communication measurement, not the pipeline's
own view: each backend times its tasks alone all the same.

About 20 s on 2 cores: one worker of each backend per case.
"""

from __future__ import annotations

import pytest

from tests import builders

pytestmark = pytest.mark.slow

# Fields a backend names in its own words (its libraries, the stage calls' kind, the device
# names, the determinism it was asked for) are compared by presence, not by value.
VIEWS = (
    "timeline",
    "simulated_timeline",
    "simulated_step_time_s",
    "bubble_fraction",
    "bubble_simulated",
    "cut_bytes",
    "task_overhead_alone_s",
    "microbatch_curve",
    "microbatch_choice",
)


@pytest.fixture(scope="module")
def experiment():
    return builders.small_experiment(builders.deep_mlp, steps_per_epoch=3)


@pytest.mark.parametrize(
    ("schedule", "micro_batches", "measure_comm"),
    [("gpipe", 2, False), ("naive", 1, True)],
)
def test_both_backends_fill_the_same_pipeline_fields(
    experiment, schedule, micro_batches, measure_comm
):
    options = dict(schedule=schedule, micro_batches=micro_batches, measure_comm=measure_comm)
    rows = {
        backend: experiment.run("pipeline", 2, backend=backend, **options)
        for backend in ("tensorflow", "jax")
    }
    for backend, row in rows.items():
        assert row.ok, f"{backend}: {row.reason}"
    tensorflow, jax = rows["tensorflow"], rows["jax"]
    assert set(tensorflow.extra) == set(jax.extra), set(tensorflow.extra) ^ set(jax.extra)
    filled = {
        backend: {name for name, value in vars(row).items() if value is not None}
        for backend, row in rows.items()
    }
    assert filled["tensorflow"] == filled["jax"], filled["tensorflow"] ^ filled["jax"]
    for view in VIEWS:
        for backend, row in rows.items():
            assert row.extra.get(view) is not None, f"{backend} lacks {view}"
