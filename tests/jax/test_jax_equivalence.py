"""Keras 3's own distribution on JAX trains the weights one device trains, to 1e-5.

Each model trains under `single`, then under `data` (DataParallel over a 1-D mesh) and `tensor`
(ModelParallel with the layout the kit derives) on 2 and 4 host devices, and on the 2-D mesh
(2 data x 2 model), and under `fsdp` (weights sharded over the data axis) on 2 devices and on
the 2-D mesh with tensor; every run's trained weights equal the single run's to 1e-5. The built-in
models and a functional Transformer block are covered.

The weights are saved before anything is measured apart from training, so these runs skip the
communication measurement (`measure_comm=False`); `tests/jax/test_fsdp.py`, the multi-process
tests and the subclassed model's case below check that it is measured.
"""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from tests.builders import largest_difference, saved_weights, transformer_block, transformer_data

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
PLANS = {
    "data-2": dict(strategy="data", devices=2),
    "data-4": dict(strategy="data", devices=4),
    "tensor-2": dict(strategy="tensor", devices=2),
    "tensor-4": dict(strategy="tensor", devices=4),
    "tensor-2x2": dict(strategy="tensor", devices=4, mesh=(2, 2)),
    # min_shard_bytes=0: every weight the data axis divides is sharded, however small
    "fsdp-2": dict(strategy="fsdp", devices=2, min_shard_bytes=0),
    "fsdp-2x2": dict(strategy="fsdp", devices=4, mesh=(2, 2), min_shard_bytes=0),
}
MODELS = {
    "mlp": dict(model="mlp", data="tabular", samples=512),
    "cnn": dict(model="cnn", data="images", samples=128),
    "transformer": dict(model="transformer", data="tokens", samples=256),
    "transformer-block": dict(model=transformer_block, data=transformer_data()),
}


def _experiment(name: str) -> gpk.Experiment:
    return gpk.Experiment(
        **MODELS[name],
        batch_size=32,
        epochs=1,
        steps_per_epoch=3,
        backend="jax",
        progress=False,
        measure_comm=False,
    )


@pytest.fixture(scope="module", params=list(MODELS))
def trained_alone(request, tmp_path_factory):
    experiment = _experiment(request.param)
    path = tmp_path_factory.mktemp(request.param) / "single.npz"
    result = experiment.run("single", 1, save_weights=str(path))
    assert result.ok, result.reason
    assert result.backend == "jax" and result.versions.get("jax")
    return request.param, experiment, saved_weights(path)


@pytest.mark.parametrize("plan", list(PLANS))
def test_every_strategy_trains_the_weights_of_one_device(trained_alone, plan, tmp_path):
    name, experiment, reference = trained_alone
    if plan == "fsdp-2x2" and name not in ("mlp", "transformer-block"):
        pytest.skip("fsdp's hybrid mesh is covered on the MLP and the Transformer block")
    path = tmp_path / f"{plan}.npz"
    result = experiment.run(**PLANS[plan], save_weights=str(path))
    assert result.ok, f"{name} {plan}: {result.reason}"
    assert (result.backend, result.strategy) == ("jax", PLANS[plan]["strategy"])
    assert largest_difference(saved_weights(path), reference) <= TOLERANCE, (name, plan)


def _single_data_and_tensor(builder, data, tmp_path) -> dict:
    """`single`, `data`×2 and `tensor`×2 on JAX, each saving its trained weights; the runs."""
    exp = gpk.Experiment(
        builder, data, batch_size=32, steps_per_epoch=3, backend="jax", progress=False
    )
    runs = {
        plan: exp.run(plan, count, save_weights=str(tmp_path / f"{plan}.npz"))
        for plan, count in (("single", 1), ("data", 2), ("tensor", 2))
    }
    assert all(r.ok for r in runs.values()), {k: r.reason for k, r in runs.items()}
    reference = saved_weights(tmp_path / "single.npz")
    for plan in ("data", "tensor"):
        trained = saved_weights(tmp_path / f"{plan}.npz")
        assert largest_difference(trained, reference) <= TOLERANCE, plan
    return runs


@pytest.mark.parametrize("name", ["subclassed", "deferred-sequential"])
def test_models_without_keras_input_train_as_one_device_on_jax(name, tmp_path):
    """A subclassed model (whose `call` takes no `training`) and a Sequential without
    `keras.Input` make their variables on first call: built from one sample, as on TensorFlow."""
    from tests.builders import deferred_sequential, small_data, subclassed_model

    builder = {"subclassed": subclassed_model, "deferred-sequential": deferred_sequential}[name]
    runs = _single_data_and_tensor(builder, small_data(), tmp_path)
    assert runs["data"].extra.get("comm_measured", True)  # measured, not skipped


def test_a_dict_of_arrays_trains_as_one_device_on_jax(tmp_path):
    """A two-input functional model fed data=({"numbers": x, "extra": e}, y), as on TensorFlow."""
    from tests.builders import two_input_arrays, two_input_model

    _single_data_and_tensor(two_input_model, two_input_arrays(), tmp_path)


def test_a_dataset_builder_is_read_as_numpy_in_its_own_order(tmp_path):
    """JAX reads what TensorFlow reads: a tf.data builder of dict samples, taken in the
    builder's order, trains as the same samples given as arrays in that order (shuffle=False)."""
    from tests.builders import two_input_arrays, two_input_dataset, two_input_model

    paths = {name: str(tmp_path / f"{name}.npz") for name in ("builder", "arrays", "data")}
    settings = dict(batch_size=32, steps_per_epoch=3, backend="jax", progress=False)
    built = gpk.Experiment(model=two_input_model, data=two_input_dataset, **settings)
    given = gpk.Experiment(
        model=two_input_model, data=two_input_arrays(), shuffle=False, **settings
    )
    runs = [
        built.run("single", 1, save_weights=paths["builder"]),
        given.run("single", 1, save_weights=paths["arrays"]),
        built.run("data", 2, save_weights=paths["data"]),
    ]
    assert all(r.ok for r in runs), [r.reason for r in runs]
    reference = saved_weights(paths["arrays"])
    for name in ("builder", "data"):
        assert largest_difference(saved_weights(paths[name]), reference) <= TOLERANCE, name


def test_a_convolution_pair_split_on_its_channels_trains_as_one_device(tmp_path):
    """Convolutions split column then row over the model axis, batch normalization, a
    depthwise convolution and pooling between them: the same weights as one device."""
    from gpu_parallel_kit.sharding.layout import derive_layout
    from gpu_parallel_kit.worker.layers import read_weights
    from tests.builders import conv_norm_block, small_images

    layout = derive_layout(read_weights(conv_norm_block()), 2)
    assert {p.path for p in layout.sharded} >= {"expand/kernel", "project/kernel"}
    _single_data_and_tensor(conv_norm_block, small_images(128), tmp_path)
