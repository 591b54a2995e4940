"""Data parallelism over several processes or hosts, through MultiWorkerMirroredStrategy.

Every worker runs this engine with its own TF_CONFIG (set by the local launcher or `gpk worker`
before the strategy exists). Each global batch is cut into one slice per replica, in worker order,
so the replicas of all workers together see exactly the global batch a single device would: the
summed gradients, and so the weights, match single-device training.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np
import tensorflow as tf

from ....cluster.network import listening_report
from ...measuring.recorder import StepRecorder
from ...strategy_hooks import ModelAndBatches
from .comm import measure_all_reduce
from .custom_loop import train_custom_loop
from .data import DataParallelEngine

# A dead or stuck peer turns into an error after this long instead of a hang.
COLLECTIVE_TIMEOUT_S = 120.0


def collective_implementation(choice: str, kind: str) -> Any:
    """RING (gRPC) on the CPU, NCCL on GPUs, unless the run names one."""
    implementation = tf.distribute.experimental.CommunicationImplementation
    if choice == "auto":
        choice = "nccl" if kind == "gpu" else "ring"
    return implementation.NCCL if choice == "nccl" else implementation.RING


class MultiWorkerEngine(DataParallelEngine):
    """MultiWorkerMirroredStrategy over the workers named in TF_CONFIG; measures communication
    like the data engine, every worker taking part in the same timed all-reduces.

    >>> exp.run(strategy="multiworker", workers=2, devices=1)
    """

    name = "multiworker"

    def make_distribution(self) -> tf.distribute.Strategy:
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        self.index = int(task["index"])
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=collective_implementation(self.spec.all_reduce, self.spec.devices.kind),
            timeout_seconds=min(self.spec.timeout_s or COLLECTIVE_TIMEOUT_S, COLLECTIVE_TIMEOUT_S),
        )
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    def describe(self) -> str:
        choice = self.spec.all_reduce
        resolved = "nccl" if self.spec.devices.kind == "gpu" else "ring"
        return f"auto ({resolved} collective)" if choice == "auto" else f"{choice} collective"

    def train(self, run: ModelAndBatches, steps_per_epoch: int, recorder: StepRecorder) -> None:
        model, dataset = run
        strategy = self.distribution
        self.prepare_replicas(model, dataset)
        replicas = strategy.num_replicas_in_sync

        def this_workers_slices(context: tf.distribute.InputContext) -> tf.data.Dataset:
            # The replicas of worker w take slices w*R .. w*R+R-1 of every global batch, one
            # each, in order (a worker's dataset feeds its replicas round-robin).
            local = context.num_replicas_in_sync // context.num_input_pipelines
            first = context.input_pipeline_id * local

            def slices(x, y):
                pieces = (_split(x, replicas), _split(y, replicas))
                return tf.data.Dataset.from_tensor_slices(pieces).skip(first).take(local)

            return dataset.flat_map(slices).prefetch(tf.data.AUTOTUNE)

        self._slices = this_workers_slices
        batches = iter(strategy.distribute_datasets_from_function(this_workers_slices))
        train_custom_loop(
            strategy, model, batches, self.spec.training.epochs, steps_per_epoch, recorder
        )

    def prepare_measurement(self, run: ModelAndBatches) -> None:
        """Nothing ahead: every worker must reach the measurement's collectives together, which
        they do after training."""
        return None

    def measure(self, run: ModelAndBatches) -> None:
        model = run.model
        self._comm, self._comm_failed = None, False
        if self.spec.measure_comm:  # every worker has the same spec: all skip the collective
            batch = next(iter(self.distribution.distribute_datasets_from_function(self._slices)))
            self._comm = measure_all_reduce(self.distribution, model, batch)
        digest = hashlib.sha256()
        for weight in model.get_weights():
            digest.update(np.ascontiguousarray(weight).tobytes())
        self._digest = digest.hexdigest()[:16]

    def result_fields(self, run: ModelAndBatches, step_time_s: float | None) -> dict[str, Any]:
        fields = super().result_fields(run, step_time_s)
        fields["extra"].update(
            **listening_report(),
            worker_index=self.index,
            weights_digest=self._digest,
        )
        fields["extra"]["comm_method"] = fields["extra"]["comm_method"].replace(
            "the all-reduce", "the collective all-reduce between worker processes", 1
        )
        return fields


def _split(batch: Any, parts: int) -> Any:
    """[global batch, ...] -> [parts, global batch / parts, ...], for every tensor of a batch
    (one tensor, or the dict or tuple of a model with several inputs or outputs)."""

    def split(tensor: tf.Tensor) -> tf.Tensor:
        shape = tf.shape(tensor)
        return tf.reshape(tensor, tf.concat([[parts, shape[0] // parts], shape[1:]], axis=0))

    return tf.nest.map_structure(split, batch)
