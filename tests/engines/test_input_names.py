"""Inputs given by name must be the model's: one sentence naming both, the same on either
backend, before training, and a comparison that starts no run after it."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_parallel_kit.runs.processes.failure_reasons import EVERY_RUN
from tests.builders import FEATURES, instant_result, small_data, small_experiment

SENTENCE = (
    "the data's inputs are named 'b' but the model's are named 'a'; key x by the model's input "
    "names, e.g. data=({'a': ...}, y), or rename the model's inputs (keras.Input(..., name=...))"
)


def _named_a():
    import keras

    a = keras.Input((FEATURES,), name="a")
    model = keras.Model(a, keras.layers.Dense(3)(keras.layers.Dense(8)(a)))
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model


def _keyed_b(**settings):
    x, y = small_data()
    return small_experiment(_named_a, data=({"b": x}, y), **settings)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_keys_the_model_does_not_name_are_one_sentence_before_training(backend):
    row = _keyed_b(backend=backend).run()
    assert (row.status, row.reason) == ("failed", SENTENCE)
    assert not row.step_times_s and row.extra[EVERY_RUN]


@pytest.mark.slow
def test_a_comparison_runs_nothing_after_the_refusal(tmp_path):
    from gpu_parallel_kit.store import RunLog

    log = str(tmp_path / "runs.sqlite")
    cmp = _keyed_b(log=log).compare(["single", "data"], [1, 2])
    assert [(r.status, r.reason) for r in cmp.results] == [("failed", SENTENCE)] * 3
    # One run's worker refused; the others were never run, only refused in its words.
    assert sum(bool(r.versions) for r in RunLog(log).results()) == 1


def test_the_grid_stops_at_a_row_refused_for_every_run(fake_machine):
    def refused_first(spec):
        if fake_machine.specs[0] is not spec:
            return instant_result(spec)
        row = instant_result(spec)
        return dataclasses.replace(row, status="failed", reason=SENTENCE, extra={EVERY_RUN: True})

    fake_machine.answer(refused_first)
    cmp = _keyed_b().compare(["single", "data"], [1, 2, 4])
    assert len(fake_machine.specs) == 1
    assert [(r.status, r.reason) for r in cmp.results] == [("failed", SENTENCE)] * 4


@pytest.mark.slow  # imports Keras, and with it a backend
def test_model_without_named_inputs_or_plain_arrays_pass():
    import keras

    from gpu_parallel_kit.worker.input_names import check_input_names

    model = _named_a()
    check_input_names(model, {"a": None, "extra": None})
    check_input_names(model, [None])  # not keyed: Keras matches it by position
    check_input_names(keras.Sequential([keras.layers.Dense(2)]), {"b": None})
