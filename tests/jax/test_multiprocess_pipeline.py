"""`pipeline` on JAX over two local processes: stage 0 in worker 0, stage 1 in worker 1, the cut
crossed by a `ppermute` collective, trains the weights of one device to 1e-5.

One module-scoped set of runs (about 20 s on two shared cores): `single`, then gpipe and 1f1b
over 2 workers × 1 device, 4 micro-batches each.
"""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from tests.builders import dense_chain, largest_difference, saved_weights, small_data

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
SCHEDULES = ("gpipe", "1f1b")


def mlp():
    import keras

    return dense_chain([16, 32, 8], keras.optimizers.SGD(learning_rate=0.05))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipeline_workers")
    exp = gpk.Experiment(
        mlp, small_data(), batch_size=16, steps_per_epoch=3, backend="jax", progress=False
    )
    rows = {"single": exp.run("single", 1, save_weights=str(folder / "single.npz"))}
    for schedule in SCHEDULES:
        rows[schedule] = exp.run(
            "pipeline",
            devices=1,
            workers=2,
            schedule=schedule,
            micro_batches=4,
            save_weights=str(folder / f"{schedule}.npz"),
        )
    assert all(r.ok for r in rows.values()), {k: r.reason for k, r in rows.items()}
    weights = {name: saved_weights(folder / f"{name}.npz") for name in rows}
    return rows, weights


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_stages_in_two_processes_train_the_weights_of_one_device(runs, schedule):
    rows, weights = runs
    assert largest_difference(weights[schedule], weights["single"]) <= TOLERANCE
    assert rows[schedule].history["loss"] == pytest.approx(rows["single"].history["loss"])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_each_stage_lives_in_its_own_process(runs, schedule):
    row = runs[0][schedule]
    assert (row.workers, row.devices, row.devices_per_worker) == (2, 2, 1)
    assert row.extra["stage_processes"] == [0, 1]
    detail = row.extra["workers_detail"]
    assert detail[0]["weights_digest"] == detail[1]["weights_digest"]  # one model, everywhere
    assert set(row.timeline["stage"]) == {0, 1}  # both processes' tasks
    assert "ppermute" in row.all_reduce  # how the cuts are crossed
