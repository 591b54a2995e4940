"""Batch order on literal inputs: in order without shuffle, a permutation per epoch."""

from __future__ import annotations

import numpy as np

from gpu_parallel_kit.worker.batching import batch_indices


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
