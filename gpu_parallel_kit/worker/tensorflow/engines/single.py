"""The baseline every speedup is measured against: one device, no communication."""

from __future__ import annotations

import tensorflow as tf

from .base import Engine


class SingleDeviceEngine(Engine):
    """Trains on one device with no tf.distribute strategy: `fit` as a user calls it.

    The run's one device is the only one its worker sees (`device_setup`), so TensorFlow's
    default placement is that device. Under `OneDeviceStrategy` instead, `fit` fed each step
    through a distributed iterator and ran it in a replica context, which cost a small model's
    step up to a fifth more than the user's own program and flattered every speedup taken
    against it (`benchmarks/baseline.py`).

    >>> exp.run(strategy="single", devices=1)
    """

    name = "single"

    def make_distribution(self) -> tf.distribute.Strategy:
        return tf.distribute.get_strategy()  # the default strategy: none
