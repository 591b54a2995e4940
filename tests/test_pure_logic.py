"""Batch order, step statistics and failure reasons on literal inputs."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_parallel_kit.runs.description.synthetic_data import make_synthetic
from gpu_parallel_kit.runs.processes.failure_reasons import classify_exception, classify_exit
from gpu_parallel_kit.worker.batching import batch_indices
from gpu_parallel_kit.worker.measuring.stats import (
    default_warmup_steps,
    median_and_spread,
    step_durations,
)


def test_batches_without_shuffle_walk_the_data_in_order():
    order = batch_indices(samples=10, global_batch=4, total_steps=3, seed=0, shuffle=False)
    assert order.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3]]


def test_each_epoch_is_a_permutation_and_the_order_depends_only_on_the_seed():
    order = batch_indices(samples=8, global_batch=4, total_steps=4, seed=3)
    assert sorted(order[:2].ravel()) == list(range(8))
    assert sorted(order[2:].ravel()) == list(range(8))
    assert not np.array_equal(order[:2], order[2:])
    assert np.array_equal(order, batch_indices(8, 4, 4, seed=3))
    assert not np.array_equal(order, batch_indices(8, 4, 4, seed=4))


def test_step_durations_are_measured_end_to_end():
    assert step_durations([1.5, 2.0, 3.0], first_begin=1.0) == [0.5, 0.5, 1.0]


def test_median_and_interquartile_spread():
    assert median_and_spread([1.0, 2.0, 3.0, 4.0, 100.0]) == (3.0, 2.0)
    assert median_and_spread([0.2]) == (0.2, 0.0)
    assert median_and_spread([]) == (None, None)


@pytest.mark.parametrize(("total", "warmup"), [(1, 0), (3, 1), (4, 2), (100, 2)])
def test_warmup_never_hides_more_than_half_the_steps(total, warmup):
    assert default_warmup_steps(total) == warmup


def test_failure_reasons():
    assert classify_exception(MemoryError("no room"), "training") == (
        "oom",
        "ran out of memory while training: MemoryError: no room",
    )
    status, reason = classify_exception(
        ValueError("in user code:\n\n  File x\n  bad shape"), "training"
    )
    assert (status, reason) == ("failed", "failed while training: ValueError: bad shape")
    assert classify_exit(-9, "training")[1].startswith("the worker process was killed by SIGKILL")
    assert classify_exit(3, "starting") == (
        "crashed",
        "the worker process exited with code 3 while starting",
    )


def test_synthetic_data_is_reproducible_and_learnable_shape():
    x, y = make_synthetic("tokens", 64, seed=1)
    x2, y2 = make_synthetic("tokens", 64, seed=1)
    assert x.shape == (64, 32) and x.dtype == np.int32 and y.shape == (64,)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    assert len(set(y.tolist())) > 1
