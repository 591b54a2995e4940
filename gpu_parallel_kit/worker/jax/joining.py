"""One JAX worker joining the others through `jax.distributed`, before anything starts JAX's
runtime: the arguments `cluster/jax_join.py` decides, JAX's own launcher detection, and the
bounds within which a dead or silent worker ends the run.
"""

from __future__ import annotations

import os

import jax

from ...cluster.jax_join import JoinPlan, check_joined, join_plan
from .device_setup import with_flag

# A run over processes ends within these bounds when a worker dies or hangs (docs: multi-worker).
JOIN_TIMEOUT_S = 60  # every worker has joined the coordinator by then
HEARTBEAT_TIMEOUT_S = 30  # a worker silent this long is dead to the others (JAX's default: 100)
SHUTDOWN_TIMEOUT_S = 10  # the workers' goodbye at the end
COLLECTIVE_TIMEOUT_S = 60  # a collective whose peers do not arrive fails then


def join(addresses: tuple[str, ...], workers: int, index: int, named: bool) -> JoinPlan:
    """`jax.distributed.initialize` as worker `index` of `workers`; how it joined.

    A local run's coordinator (in worker 0) listens on its loopback address only; a named
    cluster's may come from Keras's variables or JAX's detection of the host's launcher.
    """
    plan = join_plan(os.environ, addresses, index, named, detected_launcher() if named else None)
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = with_flag(
        flags, f"--xla_cpu_collective_timeout_seconds={COLLECTIVE_TIMEOUT_S}"
    )
    jax.distributed.initialize(
        **plan.arguments(),
        initialization_timeout=JOIN_TIMEOUT_S,
        heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S,
        shutdown_timeout_seconds=SHUTDOWN_TIMEOUT_S,
    )
    check_joined(plan, jax.process_count(), jax.process_index(), workers, index)
    return plan


def detected_launcher() -> str | None:
    """The name of the launcher JAX's own detection finds on this host ("slurm", "ompi", "k8s",
    a Cloud TPU's), or None: the order and rules `jax.distributed.initialize()` applies when it
    is given no coordinator, count or id."""
    from jax._src.clusters import ClusterEnv  # noqa: PLC0415 - JAX's detection has no public name

    for environment in ClusterEnv._cluster_types:
        if not environment.opt_in_only_method and environment.is_env_present():
            return environment.name or environment.__name__
    return None
