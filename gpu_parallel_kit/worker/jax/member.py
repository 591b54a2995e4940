"""One worker process of a JAX run over several processes: `jax.distributed` first, then the usual
run, on one mesh of every process's devices.

Entered by the local launcher (`cluster/local.py`, by name: the JAX record's `member_entry`), and
by `gpk worker` on a named cluster's hosts (`cluster/serve.py`: the record's `served_entry`), in a
process forked from the JAX server, where JAX is imported but its runtime not started. Each worker
feeds its own rows of every global batch (Keras shards only tf.data across processes), so the
workers together train on the batches a single device would.
"""

from __future__ import annotations

import os

os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported, as in run.py

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import hashlib  # noqa: E402
import re  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

from ...cluster.network import listening_report  # noqa: E402
from ...errors import GpkError  # noqa: E402
from ...runs.description.run_spec import RunSpec  # noqa: E402
from ...runs.processes.child_process import die_with_parent  # noqa: E402
from ...runs.results.run_result import RunResult  # noqa: E402
from ...strategies.long_sequences import SequenceSplit  # noqa: E402
from ...strategies.processes import process_share  # noqa: E402
from ..line_filter import LineFilter, native_logs_dropped  # noqa: E402
from ..measuring.peak_memory import PeakMemory  # noqa: E402
from ..skeleton import run_in_this_process  # noqa: E402
from ..strategy_hooks import ModelAndBatches  # noqa: E402
from .device_setup import configure_jax_devices, device_names, peak_memory, set_device_flags  # noqa: E402
from .feed import OrderedBatches  # noqa: E402
from .joining import join  # noqa: E402
from .keras_internals import place_initial_values_from_host  # noqa: E402
from .pipeline.pipeline_over_processes import for_processes  # noqa: E402
from .run import JaxRun, make_strategy  # noqa: E402

# gloo says so on stdout each time a collective first connects its peers; nothing to act on.
# Each local device's gloo thread says so; two at once interleave their halves on one line.
GLOO_CHATTER = re.compile(r"\[Gloo\] Rank |^\d+ is connected to \d+ peer ranks")


def run_member(spec: RunSpec, addresses: tuple[str, ...], index: int, send: Callable) -> None:
    """Train as worker `index` of `spec.workers`, the first address being the coordinator's;
    events and the result go to `send`.

    Shared by local workers and `gpk worker` on a named cluster's hosts (which plan their own
    devices before they get here)."""

    def emit(**event: Any) -> None:
        send({**event, "worker": index})

    # JAX's distributed runtime logs natively, at any moment, to the user's terminal.
    quiet = [f for f in (LineFilter(1, GLOO_CHATTER), native_logs_dropped()) if f]

    def unfiltered() -> None:
        for each in quiet:
            each.close()

    def report_and_exit(result: RunResult) -> None:
        emit(event="result", result=result.to_dict())
        if result.ok:  # every worker leaves together: none sees the coordinator vanish first
            with contextlib.suppress(Exception):
                jax.distributed.shutdown()
        unfiltered()
        os._exit(0)

    try:
        try:
            named = spec.cluster is not None or spec.slurm is not None
            set_device_flags(spec.devices, spec.training.deterministic)  # before JAX starts
            joined = join(addresses, spec.workers, index, named=named)
        except GpkError as error:  # the host's variables disagree with the cluster file
            reason = str(error)
            report_and_exit(RunResult(**spec.result_identity(), status="failed", reason=reason))
        place_initial_values_from_host()

        # The chief saves the weights, gathered from every worker after training
        # (ProcessRun.measure).
        member = dataclasses.replace(spec, save_weights=None)
        run = ProcessRun(member, index, spec.save_weights if index == 0 else None, joined.source)
        report_and_exit(run_in_this_process(member, emit, report_and_exit, run))
    finally:  # an unexpected error: its traceback, printed by the caller, reaches the terminal
        unfiltered()


def served_member_main(spec: RunSpec, workers: tuple[str, ...], index: int, sender: Any) -> None:
    """Entry point of `gpk worker`'s training process on JAX: its own process group, so stopping
    it takes everything it started."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    die_with_parent()  # the parent is the JAX server, which ends with `gpk worker`
    run_member(spec, workers, index, sender.send)


def slurm_step_member(spec: RunSpec, index: int, send: Callable) -> None:
    """Entry point of one task of a Slurm job step (`cluster/slurm/task.py`): JAX's own Slurm
    detection (`jax.distributed.initialize()` with no arguments) finds the coordinator, the
    count and this process's id from the variables srun sets."""
    run_member(spec, (), index, send)


class ProcessRun(JaxRun):
    """A JAX run in one of several processes: the mesh over every worker's devices, this
    worker's rows of each batch, and its memory, listening sockets and weights' digest."""

    def __init__(self, spec: RunSpec, index: int, save_to: str | None, joined_by: str) -> None:
        super().__init__(spec)
        self.index = index
        self.save_to = save_to
        self.joined_by = joined_by
        self.digest = ""

    def set_up_devices(self) -> tuple[str, ...]:
        spec = self.spec
        configure_jax_devices(spec.devices, spec.training.deterministic)
        self.local = jax.local_devices()
        self.devices = jax.devices()  # every worker's, worker 0's first
        mine = self.devices[self.index * len(self.local) : (self.index + 1) * len(self.local)]
        if mine != self.local:
            raise RuntimeError(
                f"worker {self.index}'s devices are not at its place in the mesh: {mine} against "
                f"{self.local}"
            )
        self.strategy = for_processes(make_strategy(spec, self.devices), self.local)
        return device_names(self.local)

    def prepare_data(self) -> int:
        steps = super().prepare_data()
        self.global_batches = self.batches
        share = process_share(
            self.spec.global_batch,
            len(self.devices),
            self.strategy.data_axis,
            self.spec.workers,
            self.index,
            SequenceSplit.of(self.spec).context,
        )
        whole = self.global_batches
        self.batches = OrderedBatches(whole.x, whole.y, whole.order[:, share.rows], share)
        return steps

    def measured_on(self, model: keras.Model) -> ModelAndBatches:
        """Communication is timed on the whole first global batch, as every worker holds it."""
        return ModelAndBatches(model, self.global_batches)

    def measure(self, model: keras.Model) -> None:
        """The communication, then every weight gathered from all workers (each takes part):
        its digest, which every worker's row carries, and the chief's saved copy."""
        super().measure(model)
        # A pipeline's weights live in the processes of their stages; one mesh's, in all.
        gather = getattr(self.strategy, "gathered_weights", None)
        weights = (
            gather(model)
            if gather
            else [
                np.asarray(multihost_utils.process_allgather(v.value, tiled=True))
                for v in model.weights
            ]
        )
        digest = hashlib.sha256()
        for weight in weights:
            digest.update(np.ascontiguousarray(weight).tobytes())
        self.digest = digest.hexdigest()[:16]
        if self.save_to:
            np.savez(self.save_to, *weights)

    def peak_memory(self) -> PeakMemory:
        return peak_memory(self.spec.devices.kind, self.local)

    def result_fields(self, model: keras.Model, step_time_s: float | None) -> dict[str, Any]:
        fields = super().result_fields(model, step_time_s)
        extra = fields["extra"]
        extra.update(
            **listening_report(),
            worker_index=self.index,
            weights_digest=self.digest,
            joined_by=self.joined_by,
        )
        if "comm_method" in extra:
            extra["comm_method"] += f"; across {self.spec.workers} worker processes (gloo)"
        return fields
