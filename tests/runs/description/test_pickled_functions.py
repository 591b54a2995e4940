"""A builder that cannot be sent to a worker is one sentence naming what it holds, before any
worker starts."""

from __future__ import annotations

import threading

import pytest

import gpu_parallel_kit as gpk


def test_a_builder_closing_over_a_lock_names_it():
    lock = threading.Lock()

    def build():
        with lock:
            return None

    with pytest.raises(gpk.GpkError) as caught:
        gpk.Experiment(model=build, data="tabular")
    text = str(caught.value)
    assert "model builder" in text and "'lock'" in text and "inside the function" in text
    assert "cannot pickle '_thread.lock' object" not in text


def test_a_dataset_builder_is_checked_too():
    lock = threading.Lock()

    def data():
        with lock:
            return None

    with pytest.raises(gpk.GpkError, match="dataset builder .* 'lock'"):
        gpk.Experiment(model="mlp", data=data)
