"""Real graphs in pipeline stages: keras.applications networks, a Transformer encoder and a
U-Net, cut into 2 and 4 stages, train to the weights of one device (micro_batches=1, so
BatchNormalization sees the same batch as on one device)."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from tests import builders
from tests.builders import largest_difference, saved_weights

pytestmark = pytest.mark.slow

MODELS = {
    "resnet50": (builders.resnet50, builders.small_images),
    "mobilenet_v2": (builders.mobilenet_v2, builders.small_images),
    "transformer": (builders.transformer_encoder, builders.small_tokens),
    "unet": (builders.small_unet, builders.small_images),
}


@pytest.fixture(scope="module", params=list(MODELS))
def case(request, tmp_path_factory):
    build, data = MODELS[request.param]
    experiment = gpk.Experiment(
        model=build, data=data(), batch_size=8, epochs=1, steps_per_epoch=2, progress=False
    )
    path = tmp_path_factory.mktemp(request.param) / "single.npz"
    result = experiment.run(strategy="single", save_weights=str(path))
    assert result.ok, result.reason
    return request.param, experiment, saved_weights(path)


@pytest.mark.parametrize("stages", [2, 4])
def test_the_cut_graph_trains_like_one_device(case, stages, tmp_path):
    name, experiment, reference = case
    path = tmp_path / "model.npz"
    # Eager stage tasks against an eager single device: the same arithmetic (builders._compiled).
    result = experiment.run(
        strategy="pipeline", devices=stages, recompute=False, save_weights=str(path)
    )
    assert result.ok, f"{name} on {stages} stages: {result.reason}"
    assert largest_difference(saved_weights(path), reference) <= 1e-5
    described = result.extra["stages"]
    assert len(described) == stages
    for stage in described[1:]:
        assert stage["receives"], stage
        assert all(t["bytes_per_sample"] > 0 for t in stage["receives"])
    # What crossed each cut (activations and their gradients) is what the stages report.
    assert len(result.extra["cut_bytes"]) == stages - 1
