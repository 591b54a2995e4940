"""Data parallel training on virtual CPU devices gives the weights of single-device training."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from tests.builders import largest_difference, saved_weights, small_data, small_mlp

pytestmark = pytest.mark.slow


def _train(experiment, tmp_path, strategy, devices, mode):
    path = tmp_path / f"{strategy}_{devices}_{mode}.npz"
    result = experiment.run(strategy=strategy, devices=devices, mode=mode, save_weights=str(path))
    assert result.status == "ok", result.reason
    return result, saved_weights(path)


@pytest.mark.parametrize("mode", ["fit", "explicit"])
def test_data_parallel_matches_single_device(experiment, tmp_path, mode):
    import keras  # in the test: the fast subset collects this module without TensorFlow

    _, reference = _train(experiment, tmp_path, "single", 1, "fit")
    keras.utils.set_random_seed(0)  # the seed the workers build with
    initial = small_mlp().get_weights()
    for devices in (2, 4):
        result, weights = _train(experiment, tmp_path, "data", devices, mode)
        assert result.devices == devices and result.virtual
        assert len(result.device_names) == devices
        assert result.all_reduce == "auto (reduce_to_one)"
        assert result.global_batch == 32
        diff = largest_difference(weights, reference)
        assert diff <= 1e-5, f"{mode} on {devices} devices drifted by {diff}"
        # Training really moved the weights: the comparison is not between two initial states.
        assert largest_difference(weights, initial) > 1e-3


def test_the_baseline_trains_in_the_explicit_loop_as_in_fit(experiment, tmp_path):
    # The baseline trains under no tf.distribute strategy: its explicit loop reduces onto its
    # one device, and a comparison in mode="explicit" keeps its baseline row.
    _, reference = _train(experiment, tmp_path, "single", 1, "fit")
    result, weights = _train(experiment, tmp_path, "single", 1, "explicit")
    assert result.mode == "explicit"
    assert largest_difference(weights, reference) <= 1e-5


def test_run_measures_steps_and_memory(experiment):
    result = experiment.run(strategy="data", devices=2)
    assert result.ok
    assert result.steps_per_epoch == 4 and result.epochs == 2
    assert len(result.step_times_s) == 8 - result.warmup_steps
    assert result.step_time_s > 0 and result.step_time_spread_s >= 0
    assert result.throughput_samples_s == pytest.approx(32 / result.step_time_s)
    assert set(result.peak_memory_bytes) == {"/cpu:0", "/cpu:1"}
    assert min(result.peak_memory_bytes.values()) > 10 * 2**20
    assert len(result.history["loss"]) == 2
    assert result.versions["tensorflow"].startswith("2.")


def test_weak_scaling_grows_the_global_batch(experiment):
    weak = gpk.Experiment(
        model=small_mlp,
        data=small_data(),
        batch_size=16,
        epochs=1,
        steps_per_epoch=3,
        scaling="weak",
        progress=False,
    )
    result = weak.run(strategy="data", devices=2)
    assert result.ok, result.reason
    assert result.global_batch == 32 and result.scaling == "weak"
