"""The memory budget counts every part a device holds: parameters, gradients, optimizer state
and activations, and says which it counted."""

from __future__ import annotations

import math

import pytest

from gpu_parallel_kit.worker.budget import MemoryBudgetExceeded, check_budget, needed_bytes
from tests import builders
from tests.builders import small_experiment

MIB = 2**20


def _memory(activations=0.5 * MIB):
    parts = {
        "params_bytes": MIB,
        "grads_bytes": MIB,
        "optimizer_bytes": 2 * MIB,
        "activations_bytes": activations,
    }
    return {"devices": {"/cpu:0": dict(parts), "/cpu:1": {**parts, "params_bytes": 0.5 * MIB}}}


def test_the_fullest_device_is_named_with_every_part_it_needs():
    with pytest.raises(MemoryBudgetExceeded) as refused:
        check_budget(_memory(), 4 * MIB)
    message = str(refused.value)
    assert message.startswith("/cpu:0 needs 4.5 MiB (parameters 1.0, gradients 1.0, ")
    assert "optimizer state 2.0, activations 0.5 MiB), over the memory_budget of 4.0 MiB" in message
    kept = refused.value.extra["refused"]
    assert kept["memory"] == _memory() and kept["state_bytes"]["/cpu:0"] == 3 * MIB


def test_a_part_not_known_is_left_out_of_the_sum_and_said():
    memory = _memory(activations=math.nan)
    assert needed_bytes(memory["devices"]["/cpu:0"]) == 4 * MIB
    check_budget(memory, 4 * MIB)  # fits on what is known
    with pytest.raises(MemoryBudgetExceeded, match=r"2\.0 MiB; activations not known\)"):
        check_budget(memory, 3 * MIB)


def test_no_budget_checks_nothing():
    check_budget(_memory(), None)
    check_budget({"devices": {}}, 1)


@pytest.mark.slow
def test_data_parallel_replicas_are_refused_for_gradients_and_activations_not_only_state():
    exp = small_experiment(builders.wide_mlp, steps_per_epoch=2, batch_size=256)
    state = 2.4 * MIB  # wide_mlp's parameters and Adam state; gradients add 0.8 MiB
    result = exp.run("data", 2, memory_budget=int(state + 0.4 * MIB))
    assert result.status == "oom"
    assert "gradients 0.8" in result.reason and "activations" in result.reason
    parts = result.extra["refused"]["memory"]["devices"]
    # Each replica keeps its 128 samples' outputs of 4 Dense(256) layers and the logits.
    expected = 128 * (4 * 256 + builders.CLASSES) * 4
    assert all(p["activations_bytes"] == expected for p in parts.values())
