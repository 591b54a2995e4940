"""Every bad input is one clear sentence, raised before any worker process starts."""

from __future__ import annotations

import numpy as np
import pytest

import gpu_parallel_kit as gpk
from tests.builders import small_data, small_mlp, small_mlp_experiment

# Fail loudly if validation lets anything through to a worker.
pytestmark = pytest.mark.usefixtures("no_workers")


def _one_sentence(error):
    text = str(error.value)
    assert "\n" not in text and text.count(";") <= 1
    return text


def test_unknown_strategy():
    with pytest.raises(gpk.GpkError, match="strategy='pipelines' is not known") as error:
        small_mlp_experiment().run(strategy="pipelines", devices=2)
    assert "single, data, pipeline" in _one_sentence(error)


@pytest.mark.parametrize(
    ("devices_", "message"),
    [
        ([0, 12], "device index 12 is out of range"),
        (0, "devices=0 is too few; use devices=1 or more"),
    ],
)
def test_bad_devices(devices_, message):
    with pytest.raises(gpk.GpkError, match=message) as error:
        small_mlp_experiment().run(strategy="data", devices=devices_)
    _one_sentence(error)


def test_indivisible_batch_names_the_nearest_valid_sizes():
    with pytest.raises(gpk.GpkError) as error:
        small_mlp_experiment(batch_size=250).run(strategy="data", devices=4)
    assert _one_sentence(error) == (
        "batch_size=250 is not divisible by 4 devices; use a multiple of 4, e.g. 248 or 252"
    )


def test_indivisible_batch_in_a_comparison_fails_before_the_first_run():
    with pytest.raises(gpk.GpkError, match="not divisible by 4 devices"):
        small_mlp_experiment(batch_size=30).compare(["single", "data"], [1, 2, 4])
    assert len(gpk.history()) == 0


def test_empty_data():
    with pytest.raises(gpk.GpkError, match="is empty") as error:
        small_mlp_experiment(data=(np.zeros((0, 3)), np.zeros(0)))
    _one_sentence(error)


def test_x_and_y_of_different_lengths():
    with pytest.raises(gpk.GpkError, match="has 10 inputs but 9 targets") as error:
        small_mlp_experiment(data=(np.zeros((10, 3)), np.zeros(9)))
    _one_sentence(error)


@pytest.mark.parametrize("epochs", [0, -1])
def test_epochs_must_be_positive(epochs):
    with pytest.raises(gpk.GpkError, match=f"epochs={epochs} is too few; use epochs=1 or more"):
        small_mlp_experiment(epochs=epochs)


def test_fewer_samples_than_one_batch():
    with pytest.raises(gpk.GpkError, match="fewer than one global batch of 512"):
        small_mlp_experiment(batch_size=512).run(strategy="single")


def test_single_strategy_on_several_devices():
    with pytest.raises(gpk.GpkError, match="strategy='single' runs on one device, not 2"):
        small_mlp_experiment().run(strategy="single", devices=2)


def test_nccl_needs_gpus():
    with pytest.raises(gpk.GpkError, match="all_reduce='nccl' needs GPUs"):
        small_mlp_experiment().run(strategy="data", devices=2, all_reduce="nccl")


def test_unknown_built_in_model():
    with pytest.raises(gpk.GpkError, match="model='resnet' is neither a built-in model"):
        gpk.Experiment(model="resnet")


def test_a_built_model_instead_of_a_builder():
    class FakeModel:
        def fit(self):
            pass

    with pytest.raises(TypeError, match="pass a function that builds it"):
        gpk.Experiment(model=FakeModel(), data=small_data())


def test_custom_model_needs_data():
    with pytest.raises(gpk.GpkError, match="data= is missing"):
        gpk.Experiment(model=small_mlp)


def test_unknown_synthetic_set():
    with pytest.raises(gpk.GpkError, match="data='mnist' is not a built-in data set"):
        gpk.Experiment(model="mlp", data="mnist")


def test_naive_schedule_with_micro_batches():
    with pytest.raises(gpk.GpkError, match="schedule='naive' runs one micro-batch") as error:
        small_mlp_experiment().run(strategy="model", devices=2, schedule="naive", micro_batches=8)
    _one_sentence(error)


def test_batch_that_does_not_split_into_micro_batches():
    with pytest.raises(gpk.GpkError) as error:
        small_mlp_experiment(batch_size=30).run(strategy="model", devices=2, micro_batches=4)
    assert _one_sentence(error) == (
        "batch_size=30 does not split into 4 micro-batches; use a multiple of 4, e.g. 28 or 32"
    )


def test_unknown_schedule():
    with pytest.raises(gpk.GpkError, match="schedule='zigzag' is not known"):
        small_mlp_experiment().run(strategy="model", devices=2, schedule="zigzag")


def test_model_parallel_defaults_to_gpipe_when_micro_batches_are_asked():
    spec = small_mlp_experiment().plan("model", 2, micro_batches=4)
    assert (spec.schedule, spec.micro_batches) == ("gpipe", 4)
    assert small_mlp_experiment().plan("model", 2).schedule == "naive"
    assert small_mlp_experiment().plan("data", 2, micro_batches=4).schedule == ""
