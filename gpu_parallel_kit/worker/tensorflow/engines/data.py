"""Data parallelism: a replica of the model per device, the global batch split between them."""

from __future__ import annotations

import traceback
from typing import Any

import tensorflow as tf

from ....runs.description.communication_reuse import reuse_fields
from ...measuring.comm_once import communication_once
from ...measuring.stats import COMM_BLOCKS, COMM_STEPS_PER_BLOCK, Timing
from ...strategy_hooks import ModelAndBatches
from .base import Engine
from .comm import not_measured, prepared_all_reduce, traffic_per_device


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


def split_between_replicas(strategy: tf.distribute.Strategy, batch: Any) -> Any:
    """One global batch as per-replica slices, as `fit` splits it. Slicing a batch already taken
    costs milliseconds; a new distributed iterator over the data set costs a tenth of a second."""
    replicas = strategy.num_replicas_in_sync

    def part(context: tf.distribute.ValueContext) -> Any:
        index = context.replica_id_in_sync_group

        def slice_of(value: tf.Tensor) -> tf.Tensor:
            size = value.shape[0] // replicas
            return value[index * size : (index + 1) * size]

        return tf.nest.map_structure(slice_of, batch)

    return strategy.experimental_distribute_values_from_function(part)


class DataParallelEngine(Engine):
    """MirroredStrategy over the run's devices, with a chosen all-reduce.

    >>> exp.run(strategy="data", devices=4, all_reduce="auto", mode="fit")
    """

    name = "data"
    _measurement: Timing | None = None  # traced, timed after training
    _comm: dict[str, Any] | None = None
    _comm_failed = False

    def make_distribution(self) -> tf.distribute.Strategy:
        return tf.distribute.MirroredStrategy(
            devices=list(self.device_names),
            cross_device_ops=cross_device_ops(self.spec.all_reduce, self.spec.devices.kind),
        )

    def fit_input(self, dataset: tf.data.Dataset) -> Any:
        """On CPU devices, each replica reads its own share of every batch from a pipeline of
        its own, where fit fed the step on the host (`datasets.replica_shares`). Distributing
        the global batch instead puts a per-device iterator in every execution, which copies
        each share between devices that are all the host's memory: measured 1.4 times the
        execution of a small MLP on one device (`benchmarks/baseline.py`). On GPUs Keras's own
        distribution stands: it prefetches each share onto its GPU, and the step then waits for
        no copy."""
        if self.replica_shares is None or self.spec.devices.kind == "gpu":
            return dataset
        shares = self.replica_shares
        options = tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            experimental_fetch_to_device=False,
        )
        return self.distribution.distribute_datasets_from_function(
            lambda context: shares(context.input_pipeline_id, context.num_input_pipelines),
            options,
        )

    def prepare_measurement(self, run: ModelAndBatches) -> None:
        """Trace the communication measurement before the first timed step, once: after
        training only its timed calls remain (`comm.prepared_all_reduce`)."""
        if self._measurement is not None or self._comm_failed or not self._measures_here:
            return
        try:
            batch = split_between_replicas(self.distribution, next(iter(run.batches)))
            self._measurement = prepared_all_reduce(self.distribution, run.model, batch)
        except Exception:  # noqa: BLE001 - a measurement must not cost the run its results
            traceback.print_exc()
            self._comm_failed = True

    def measure(self, run: ModelAndBatches) -> None:

        def prepared() -> Any:
            self.prepare_measurement(run)
            return self._measurement

        self._comm, failed = communication_once(self.spec.comm_from, prepared)
        self._comm_failed = self._comm_failed or failed

    @property
    def _measures_here(self) -> bool:
        return self.spec.measure_comm and self.spec.comm_from is None

    def result_fields(self, run: ModelAndBatches, step_time_s: float | None) -> dict[str, Any]:
        fields = super().result_fields(run, step_time_s)
        if self._comm is None:
            why = "the measurement failed; the worker's stderr says why"
            why = why if self._comm_failed else "measure_comm=False"
            return {**fields, **not_measured(fields["extra"], self.reduced_bytes, why)}
        comm = dict(self._comm)
        exposed = comm.pop("comm_time_s")
        algorithm = self.describe()
        comm["traffic_bytes_per_device"] = traffic_per_device(
            algorithm, self.parameter_bytes, self.spec.replicas
        )
        comm["comm_method"] = (
            f"exposed: median step with minus without the all-reduce, alternated in {COMM_BLOCKS} "
            f"blocks of {COMM_STEPS_PER_BLOCK} steps, noise: half the range of the blocks' "
            "differences; "
            "standalone: the all-reduce alone on gradient-shaped tensors"
            + (
                "; virtual devices: runtime overhead on shared cores, not a network cost"
                if self.spec.devices.virtual
                else ""
            )
        )
        if self.spec.comm_from is not None:
            comm.update(reuse_fields(self.spec.comm_from))
        fields["extra"].update(comm)
        return {
            **fields,
            "comm_time_s": exposed,
            "comm_share": exposed / step_time_s if step_time_s else None,
            "comm_bytes": self.reduced_bytes,
        }

    @property
    def reduced_bytes(self) -> int:
        """The gradient bytes the all-reduce sums each step: none with one replica, which has
        nothing to add its gradients to (the run still calls the reduction, a local copy)."""
        return self.parameter_bytes if self.spec.replicas > 1 else 0

    def describe(self) -> str:
        choice = self.spec.all_reduce
        if choice == "auto":
            resolved = "nccl" if self.spec.devices.kind == "gpu" else "reduce_to_one"
            return f"auto ({resolved})"
        return choice
