"""A JAX run's batches, read from its (memory-mapped) arrays as `fit` asks for them.

`batch_indices` fixes the run's order up front (the same seeded order TensorFlow runs take), but
only as indices: each batch is gathered when Keras asks for it, so a run holds one batch at a
time, not epochs x the dataset. Keras iterates a `PyDataset` by index, in order, across epochs
when `steps_per_epoch` is given, so step k of the run reads row k of the order.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from ...strategies.processes import ProcessShare


class OrderedBatches(keras.utils.PyDataset):
    """Batch k is the samples in row k of `order` (shape: steps x global batch).

    >>> fit(OrderedBatches(x, y, batch_indices(len(x), 32, steps, seed)), steps_per_epoch=...)
    """

    def __init__(
        self, x: Any, y: Any, order: np.ndarray, share: ProcessShare | None = None
    ) -> None:
        super().__init__()  # one worker, no threads: the batches come in order
        self.x, self.y, self.order, self.share = x, y, order, share

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        rows = self.order[index]
        x, y = take(self.x, rows), take(self.y, rows)
        if self.share is None or self.share.whole_sequences:
            return x, y
        return keras.tree.map_structure(self._positions, (x, y))

    def _positions(self, array: np.ndarray) -> np.ndarray:
        """This worker's positions of each sequence (an array of two axes or more), as a
        context axis lays inputs out (`ContextParallel.get_data_layout`)."""
        if array.ndim < 2:
            return array
        return array[:, self.share.positions(array.shape[1])]


def take(values: Any, rows: np.ndarray) -> Any:
    """The samples `rows` names, from an array or a dict or tuple of arrays; floats other than
    Keras's floatx are cast to it, as Keras's own array adapter casts whole arrays."""
    if isinstance(values, dict):
        return {key: _rows(v, rows) for key, v in values.items()}
    if isinstance(values, tuple | list):
        return type(values)(_rows(v, rows) for v in values)
    return _rows(values, rows)


def _rows(array: Any, rows: np.ndarray) -> np.ndarray:
    picked = np.asarray(array[rows])
    floatx = keras.backend.floatx()
    if np.issubdtype(picked.dtype, np.floating) and picked.dtype != np.dtype(floatx):
        picked = picked.astype(floatx)
    return picked
