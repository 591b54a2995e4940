"""The synthetic data sets: reproducible from their seed, in the shapes a model takes."""

from __future__ import annotations

import numpy as np

from gpu_parallel_kit.runs.description.synthetic_data import make_synthetic


def test_synthetic_data_is_reproducible_and_learnable_shape():
    x, y = make_synthetic("tokens", 64, seed=1)
    x2, y2 = make_synthetic("tokens", 64, seed=1)
    assert x.shape == (64, 32) and x.dtype == np.int32 and y.shape == (64,)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    assert len(set(y.tolist())) > 1
