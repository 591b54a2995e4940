"""One worker of a multi-worker run: TF_CONFIG, its devices, then the usual run in this process.

Entered in a fresh child by the local launcher (cluster/local.py) and by `gpk worker` on a named
cluster's hosts (cluster/serve.py), both by name (`runs.processes.entry_points.MEMBER_ENTRY`).
"""

from __future__ import annotations

from . import tensorflow_first  # noqa: F401 - TensorFlow before Keras, quietly

# isort: split

import contextlib
import dataclasses
import os
from typing import Any

import tensorflow as tf

from ...cluster.config import tf_config
from ...cluster.worker_devices import local_worker_plan
from ...runs.description.run_spec import RunSpec
from ...runs.processes.child_process import die_with_parent
from ...runs.results.run_result import RunResult
from ..line_filter import native_logs_dropped
from .quiet_start import gpus_listed_quietly
from .run import run_in_this_process

COLLECTIVE_INTER_OP_THREADS = 4  # collectives block threads; 2 cores' default can starve them


def run_member(spec: RunSpec, addresses: tuple[str, ...], index: int, send: Any) -> None:
    """Train as worker `index` of the cluster at `addresses`, sending events and the result.

    Shared by local workers and `gpk worker` on a named cluster's hosts (which plan their own
    devices before they get here).
    """
    # A worker's stderr is the user's terminal: its first look for GPUs (cuInit's failure on a
    # machine without drivers) and the collectives' runtime log there natively, at any moment.
    quiet = native_logs_dropped()

    def emit(**event: Any) -> None:
        send({**event, "worker": index})

    def report_and_exit(result: RunResult) -> None:
        emit(event="result", result=result.to_dict())
        if quiet:
            quiet.close()
        os._exit(0)

    try:
        os.environ["TF_CONFIG"] = tf_config(addresses, index)  # before the runtime starts
        if spec.cluster is None and spec.slurm is None:  # Slurm binds each task's GPUs
            gpus = len(gpus_listed_quietly())  # does not start the runtime
            devices = local_worker_plan(spec.devices, index, spec.workers, gpus)
            spec = dataclasses.replace(spec, devices=devices)
        tf.config.threading.set_inter_op_parallelism_threads(COLLECTIVE_INTER_OP_THREADS)
        # "Efficient batch_reduce is not supported if destinations are different": said by
        # MultiWorkerMirroredStrategy on every trace of a per-variable reduction; nothing to act on.
        tf.get_logger().setLevel("ERROR")
        member = spec if index == 0 else dataclasses.replace(spec, save_weights=None)
        report_and_exit(run_in_this_process(member, emit, report_and_exit))
    finally:  # an unexpected error: its traceback, printed by the caller, reaches the terminal
        if quiet:
            quiet.close()


def slurm_step_member(spec: RunSpec, index: int, send: Any) -> None:
    """Entry point of one task of a Slurm job step (`cluster/slurm/task.py`): TensorFlow's own
    `SlurmClusterResolver` gives every task's address from the variables srun sets."""
    # Slurm binds each task's GPUs itself; the resolver's own GPU arithmetic (which needs a
    # non-zero GPU per task) is left unused.
    tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS", "1"))
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
        port_base=step_port_base(os.environ),
        gpus_per_node=tasks,
        gpus_per_task=1,
        auto_set_gpu=False,
    )
    addresses = tuple(resolver.cluster_spec().as_dict()["worker"])
    _, task = resolver.get_task_info()  # known once the cluster spec is
    if task != index:
        raise RuntimeError(f"SlurmClusterResolver made this task {task}, but srun made it {index}")
    run_member(spec, addresses, index, send)


def step_port_base(env: Any) -> int:
    """The first port of a step's TensorFlow servers: one range per job and step, so a step
    never meets the last one's ports in TIME_WAIT (the resolver's default is always 8888)."""
    job, step = int(env.get("SLURM_JOB_ID", "0")), int(env.get("SLURM_STEP_ID", "0"))
    return 20000 + (job * 97 + step * 16) % 30000


def served_member_main(spec: RunSpec, workers: tuple[str, ...], index: int, sender: Any) -> None:
    """Entry point of `gpk worker`'s training process: its own process group, so stopping it
    takes everything it started."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    # The parent is the fork server, which ends with `gpk worker`: so does this run, then.
    die_with_parent()
    run_member(spec, workers, index, sender.send)
