"""The baseline every speedup is measured against: one device, no communication."""

from __future__ import annotations

import tensorflow as tf

from .base import Engine


class SingleDeviceEngine(Engine):
    """Trains on one device through OneDeviceStrategy.

    A strategy (rather than no strategy) keeps the code path, loss scaling and input pipeline the
    same as the data-parallel engine, so a comparison measures parallelism, not code differences.

    >>> exp.run(strategy="single", devices=1)
    """

    name = "single"

    def make_distribution(self) -> tf.distribute.Strategy:
        return tf.distribute.OneDeviceStrategy(self.device_names[0])
