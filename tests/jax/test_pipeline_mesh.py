"""`pipeline` with `mesh=(data, model)` on JAX: 2 stages of a 2 × 2 sub-mesh each on 8 host
devices train the weights of one device to 1e-5 (an MLP under 1f1b, a Transformer block under
gpipe), each stage's arrays sharded over its own four devices; the row names the mesh's parts
and reports the bytes across the cut and those of the collectives inside each stage.

About 35 s on 2 cores: two single runs and two pipeline runs, each a JAX worker.
"""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from tests import builders
from tests.builders import largest_difference, saved_weights

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
MODELS = {
    "mlp": (dict(model=builders.deep_mlp), "1f1b"),
    "transformer-block": (
        dict(model=builders.transformer_block, data=builders.transformer_data()),
        "gpipe",
    ),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_two_stages_of_two_by_two_train_the_weights_of_one_device(name, tmp_path):
    settings, schedule = MODELS[name]
    experiment = builders.small_experiment(
        settings["model"], backend="jax", **{k: v for k, v in settings.items() if k != "model"}
    )
    single, piped = tmp_path / "single.npz", tmp_path / "pipeline.npz"
    reference = experiment.run("single", 1, save_weights=str(single))
    assert reference.ok, reference.reason
    result = experiment.run(
        "pipeline", 8, mesh=(2, 2), schedule=schedule, micro_batches=4, save_weights=str(piped)
    )
    assert result.ok, result.reason
    assert largest_difference(saved_weights(piped), saved_weights(single)) <= TOLERANCE

    extra = result.extra
    assert extra["mesh_axes"] == "pipeline 2 × tensor 2 × data 2"
    assert extra["lane_devices"] == [4, 4]  # the timeline's lanes are stages of 4 devices
    stages = extra["stages"]
    assert len(stages) == 2
    held = [set(stage["variable_devices"]) for stage in stages]
    assert all(len(devices) == 4 for devices in held) and not held[0] & held[1]
    assert [set(stage["devices"]) for stage in stages] == held
    # The layers are split over the model axis: some collectives inside every stage.
    assert extra["tensor_all_reduce_bytes"] > 0 and extra["data_all_reduce_bytes"] > 0
    inside = extra["tensor_all_reduce_bytes"] + extra["data_all_reduce_bytes"]
    assert result.comm_bytes == sum(extra["cut_bytes"]) + inside
    memory = extra["memory"]["devices"]
    assert sorted(memory) == sorted(f"/cpu:{i}" for i in range(8))
    for parts in memory.values():  # a device holds a shard of its stage, no more
        assert (
            0 < parts["params_bytes"] < stages[0]["parameter_bytes"] + stages[1]["parameter_bytes"]
        )
        assert parts["grads_bytes"] == parts["params_bytes"]
    row = gpk.Comparison([result]).table.iloc[0]
    assert (row["data"], row["tensor"], row["stages"]) == (2, 2, 2)
    assert row["mesh"] == "2x2"
