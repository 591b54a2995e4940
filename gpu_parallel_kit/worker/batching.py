"""Which samples go into which global batch: a pure function of the seed, the epoch and the step.

The order is computed up front with NumPy rather than by tf.data's shuffle, whose seeds advance
each time Keras or a strategy creates an iterator. That way every strategy and mode of an
experiment trains on exactly the same batches, and a comparison measures the strategy, not
the order.
"""

from __future__ import annotations

import numpy as np


def batch_indices(
    samples: int, global_batch: int, total_steps: int, seed: int, shuffle: bool = True
) -> np.ndarray:
    """Indices of shape (total_steps, global_batch); each epoch is a fresh permutation.

    An epoch uses only full global batches (the remainder is left out, differently each epoch
    when shuffling), so every step splits evenly over the replicas.
    """
    per_epoch = (samples // global_batch) * global_batch
    if per_epoch == 0:
        raise ValueError(f"{samples} samples hold no global batch of {global_batch}")
    needed = total_steps * global_batch
    chunks: list[np.ndarray] = []
    epoch = 0
    while sum(len(chunk) for chunk in chunks) < needed:
        order = (
            np.random.default_rng([seed, epoch]).permutation(samples)
            if shuffle
            else np.arange(samples)
        )
        chunks.append(order[:per_epoch])
        epoch += 1
    return np.concatenate(chunks)[:needed].reshape(total_steps, global_batch)
