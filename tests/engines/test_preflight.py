"""Mistakes between a model and its data are one sentence from the worker's first second, not
Keras's words from inside the first step."""

from __future__ import annotations

import numpy as np
import pytest

from tests.builders import CLASSES, FEATURES, small_data, small_experiment

pytestmark = pytest.mark.slow


def _classifier(units: int = CLASSES, loss: str = "sparse_categorical_crossentropy"):
    def build():
        import keras

        model = keras.Sequential(
            [keras.Input((FEATURES,)), keras.layers.Dense(8), keras.layers.Dense(units)]
        )
        model.compile(optimizer="sgd", loss=loss)
        return model

    return build


def _failed(result) -> str:
    assert result.status == "failed", result.reason
    assert not result.step_times_s
    for raw in ("Traceback", "ValueError", "must have the same rank", "GpkError"):
        assert raw not in result.reason
    return result.reason


def test_categorical_loss_with_integer_labels():
    exp = small_experiment(_classifier(loss="categorical_crossentropy"))
    reason = _failed(exp.run())
    assert "one-hot" in reason and "sparse_categorical_crossentropy" in reason


def test_sparse_loss_with_one_hot_labels():
    x, y = small_data()
    exp = small_experiment(_classifier(), data=(x, np.eye(CLASSES, dtype="float32")[y]))
    reason = _failed(exp.run(strategy="data", devices=2))
    assert "integer class labels" in reason and "categorical_crossentropy" in reason


def test_an_output_narrower_than_the_labels():
    reason = _failed(small_experiment(_classifier(units=2)).run())
    assert "labels go up to 2" in reason and "3 units" in reason


def test_an_input_shape_that_does_not_fit_x():
    x, y = small_data()
    reason = _failed(small_experiment(_classifier(), data=(x[:, :5], y)).run())
    assert f"({FEATURES},)" in reason and "(5,)" in reason
