"""JAX runs over several local processes: one mesh over every worker's devices, through
`jax.distributed` and gloo, trains the weights of one device to 1e-5.

One module-scoped set of runs (about 45 s on two shared cores): `single`, then `data` and `fsdp`
over 2 workers × 1 device and `tensor` over 2 workers × 1 device (its model axis across the
processes). The model has an 8 MiB kernel, so fsdp reduce-scatters 4 MiB gradient chunks through
gloo, the size at which gloo's reduce-scatter once went wrong (jax-ml/jax#40830).
"""

from __future__ import annotations

import math

import pytest

import gpu_parallel_kit as gpk
from tests.builders import dense_chain, largest_difference, saved_weights, small_data

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
BIG = (1024, 2048)  # the 8 MiB kernel: 2048 x 1024 float32
PLANS = {
    "data": dict(strategy="data", devices=1, workers=2),
    "fsdp": dict(strategy="fsdp", devices=1, workers=2, min_shard_bytes=0),
    "tensor": dict(strategy="tensor", devices=1, workers=2),
}


def wide_model():
    import keras

    return dense_chain(list(BIG), keras.optimizers.SGD(learning_rate=0.01))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("multiprocess")
    exp = gpk.Experiment(
        wide_model, small_data(), batch_size=32, steps_per_epoch=3, backend="jax", progress=False
    )
    rows = {"single": exp.run("single", 1, save_weights=str(folder / "single.npz"))}
    for name, plan in PLANS.items():
        rows[name] = exp.run(**plan, save_weights=str(folder / f"{name}.npz"))
    assert all(r.ok for r in rows.values()), {k: r.reason for k, r in rows.items()}
    weights = {name: saved_weights(folder / f"{name}.npz") for name in rows}
    return rows, weights


@pytest.mark.parametrize("plan", list(PLANS))
def test_workers_train_the_weights_of_one_device(runs, plan):
    rows, weights = runs
    assert largest_difference(weights[plan], weights["single"]) <= TOLERANCE, plan


@pytest.mark.parametrize("plan", list(PLANS))
def test_the_row_spans_every_worker(runs, plan):
    row = runs[0][plan]
    assert (row.backend, row.workers, row.devices, row.devices_per_worker) == ("jax", 2, 2, 1)
    detail = row.extra["workers_detail"]
    assert [d["status"] for d in detail] == ["ok", "ok"]
    assert detail[0]["weights_digest"] == detail[1]["weights_digest"]  # one model, everywhere
    assert len(row.peak_memory_bytes) == 2 and all(row.peak_memory_bytes.values())
    assert [n.split()[0] for n in row.device_names] == ["worker0", "worker1"]
    assert "2 worker processes" in row.extra["comm_method"]
    measured = row.comm_time_s if row.comm_time_s is not None else row.extra["comm_time_raw_s"]
    assert measured is not None and row.extra["comm_noise_s"] >= 0


def test_the_mesh_is_the_whole_mesh(runs):
    rows = runs[0]
    assert rows["fsdp"].mesh == "2x1" and rows["tensor"].mesh == "1x2"
    big = next(p for p in rows["fsdp"].extra["layout"] if p["shape"] == list(BIG))
    assert math.prod(big["shard_shape"]) * 2 == math.prod(BIG)  # each worker: 4 of its 8 MiB


def test_workers_listen_on_loopback_only(runs):
    row = runs[0]["data"]
    assert "loopback only" in row.extra["network_isolation"]
    assert row.extra["network_interfaces"] == ["lo"]
    assert row.extra["listening"] and row.extra["reachable_from_network"] is False
    loopback = ("127.", "[::1]", "[::ffff:127.")
    assert all(address.startswith(loopback) for address in row.extra["listening"])
