"""`fsdp` on host devices: each device holds 1/N of the sharded state, every optimizer slot is
placed exactly as its weight, the communication is counted and measured, and a subclassed model
and a keras.applications network train the weights of one device to 1e-5.

The built-in models and the Transformer block are in test_jax_equivalence.py, beside the other
strategies, so they share its single-device runs.
"""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from tests.builders import largest_difference, saved_weights

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def mlp_runs():
    exp = gpk.Experiment(
        "mlp", "tabular", batch_size=32, steps_per_epoch=2, backend="jax", progress=False
    )
    single = exp.run("single", 1)
    sharded = exp.run("fsdp", 4, min_shard_bytes=0)
    assert single.ok and sharded.ok, (single.reason, sharded.reason)
    return single, sharded


def test_each_device_holds_a_quarter_of_the_state_on_four_devices(mlp_runs):
    single, sharded = mlp_runs
    whole = single.extra["state_bytes"]["/cpu:0"]
    held = sharded.extra["state_bytes"]
    assert set(held) == {f"/cpu:{i}" for i in range(4)}
    # Only the 10-wide classifier bias (4 does not divide 10) and Adam's two scalars stay whole.
    assert max(held.values()) == pytest.approx(whole / 4, rel=0.01)


def test_every_optimizer_slot_is_placed_exactly_as_its_weight(mlp_runs):
    _, sharded = mlp_runs
    layout = sharded.extra["layout"]
    assert sum("batch" in p["axes"] for p in layout) >= 7  # every weight 4 divides
    for p in layout:
        assert p["placed_axes"] == p["axes"], p["variable"]  # Keras placed what was asked
        assert len(p["slot_axes"]) == 2, p["variable"]  # Adam: momentum and velocity
        assert all(slot == p["placed_axes"] for slot in p["slot_axes"]), p["variable"]


def test_the_gathers_and_scatters_are_counted_and_timed(mlp_runs):
    _, sharded = mlp_runs
    extra = sharded.extra
    assert extra["all_gather_bytes"] == 2 * extra["reduce_scatter_bytes"] > 0
    assert sharded.comm_bytes >= extra["all_gather_bytes"] + extra["reduce_scatter_bytes"]
    # On loaded shared cores the time may fall below its noise: it is then kept in extra.
    measured = sharded.comm_time_s if sharded.comm_time_s is not None else extra["comm_time_raw_s"]
    assert measured > 0 and extra["comm_noise_s"] >= 0
    assert extra["comm_method"].startswith("standalone")
    assert sharded.mesh == "4x1"


def test_a_subclassed_model_trains_the_weights_of_one_device(tmp_path):
    from tests.builders import small_data, subclassed_model

    exp = gpk.Experiment(
        subclassed_model,
        small_data(),
        batch_size=32,
        steps_per_epoch=3,
        backend="jax",
        progress=False,
    )
    paths = {plan: tmp_path / f"{plan}.npz" for plan in ("single", "fsdp")}
    single = exp.run("single", 1, save_weights=str(paths["single"]))
    sharded = exp.run("fsdp", 2, min_shard_bytes=0, save_weights=str(paths["fsdp"]))
    assert single.ok and sharded.ok, (single.reason, sharded.reason)
    assert any("batch" in p["axes"] for p in sharded.extra["layout"])
    difference = largest_difference(saved_weights(paths["fsdp"]), saved_weights(paths["single"]))
    assert difference <= TOLERANCE


def test_a_keras_applications_network_trains_the_weights_of_one_device(tmp_path):
    """VGG16 (weights=None, 32×32): its conv kernels are large enough for the default
    min_shard_bytes, so the default threshold shards them and leaves the biases whole."""
    from tests.builders import small_images, vgg16_small

    exp = gpk.Experiment(
        vgg16_small,
        small_images(32),
        batch_size=16,
        steps_per_epoch=1,
        backend="jax",
        progress=False,
        measure_comm=False,
    )
    paths = {plan: tmp_path / f"{plan}.npz" for plan in ("single", "fsdp")}
    single = exp.run("single", 1, save_weights=str(paths["single"]))
    sharded = exp.run("fsdp", 2, save_weights=str(paths["fsdp"]))
    assert single.ok and sharded.ok, (single.reason, sharded.reason)
    roles = {
        p["variable"].rpartition("block5_conv3/")[2]: p["role"]
        for p in sharded.extra["layout"]
        if "block5_conv3/" in p["variable"]
    }
    assert roles == {"kernel": "sharded", "bias": "replicated"}
    difference = largest_difference(saved_weights(paths["fsdp"]), saved_weights(paths["single"]))
    assert difference <= TOLERANCE


def test_memory_by_part_falls_as_one_over_n_for_the_sharded_state(mlp_runs):
    single, sharded = mlp_runs
    whole = single.extra["memory"]["devices"]["/cpu:0"]
    assert whole["params_bytes"] >= single.extra["parameter_bytes"]
    assert whole["grads_bytes"] == single.extra["parameter_bytes"]
    assert whole["optimizer_bytes"] > 2 * whole["params_bytes"] - 100  # Adam: two slots each
    for parts in sharded.extra["memory"]["devices"].values():
        for part in ("params_bytes", "grads_bytes", "optimizer_bytes"):
            assert parts[part] == pytest.approx(whole[part] / 4, rel=0.02), part
        # each device computes a quarter of the batch
        assert parts["activations_bytes"] == pytest.approx(whole["activations_bytes"] / 4)
    assert sharded.extra["memory"]["how"]["params_bytes"].startswith("measured")
