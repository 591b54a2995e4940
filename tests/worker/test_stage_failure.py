"""A stage's pass that fails in Python refuses the model in one sentence naming its layers, on
either backend; the backend's runtime errors and the kit's own pass unchanged."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.worker.pipeline.stage_failure import layers_named


class RuntimeFailure(Exception):
    """Stands for a backend's runtime error (out of memory on a device)."""


named = layers_named("JAX", (RuntimeFailure,), lambda tasks: tasks.stage)


class Tasks:
    def __init__(self, error, calls=("dense", "dense_2")):
        self.stage = SimpleNamespace(index=1, cut=SimpleNamespace(calls=list(calls)))
        self.error = error

    @named
    def forward(self):
        raise self.error


def test_a_python_failure_names_the_stage_its_layers_and_the_pass(capsys):
    with pytest.raises(GpkError) as raised:
        Tasks(TypeError("unhashable")).forward()
    sentence = str(raised.value)
    assert sentence.startswith("stage 1's layers 'dense' to 'dense_2' cannot be run")
    assert "on JAX (TypeError in its forward pass)" in sentence and "unhashable" not in sentence
    assert "unhashable" in capsys.readouterr().err  # the error itself, for the worker's log


def test_one_layer_is_named_alone():
    with pytest.raises(GpkError, match="stage 1's layer 'dense' cannot"):
        Tasks(ValueError("x"), calls=("dense",)).forward()


@pytest.mark.parametrize("error", [RuntimeFailure("oom"), MemoryError(), GpkError("own")])
def test_runtime_errors_and_the_kits_own_pass_unchanged(error):
    with pytest.raises(type(error)):
        Tasks(error).forward()
