"""Data parallelism: a replica of the model per device, the global batch split between them."""

from __future__ import annotations

import tensorflow as tf

from .base import Engine


def cross_device_ops(choice: str, kind: str) -> tf.distribute.CrossDeviceOps:
    """The all-reduce behind MirroredStrategy.

    `auto` is NCCL on real GPUs and reduction to one device elsewhere: on CPU and virtual devices,
    collective all-reduces of different group sizes collide inside one process and bring no speed.
    """
    if choice == "auto":
        choice = "nccl" if kind == "gpu" else "reduce_to_one"
    if choice == "nccl":
        return tf.distribute.NcclAllReduce()
    if choice == "hierarchical":
        return tf.distribute.HierarchicalCopyAllReduce()
    return tf.distribute.ReductionToOneDevice()


class DataParallelEngine(Engine):
    """MirroredStrategy over the run's devices, with a chosen all-reduce.

    >>> exp.run(strategy="data", devices=4, all_reduce="auto", mode="fit")
    """

    name = "data"

    def make_strategy(self) -> tf.distribute.Strategy:
        return tf.distribute.MirroredStrategy(
            devices=list(self.device_names),
            cross_device_ops=cross_device_ops(self.spec.all_reduce, self.spec.devices.kind),
        )

    def describe_all_reduce(self) -> str:
        choice = self.spec.all_reduce
        if choice == "auto":
            resolved = "nccl" if self.spec.devices.kind == "gpu" else "reduce_to_one"
            return f"auto ({resolved})"
        return choice
