"""How a JAX worker joins the others: the arguments of `jax.distributed.initialize`, decided from
the run's addresses, the worker's index and the host's environment. Plain data, no JAX here.

Local workers always join at their own loopback addresses. On a named cluster, in this order:
Keras's variables (`KERAS_DISTRIBUTION_JOB_ADDRESSES`, `KERAS_DISTRIBUTION_NUM_PROCESSES`,
`KERAS_DISTRIBUTION_PROCESS_ID`) when the host sets them; else JAX's own detection when JAX
recognises the launcher that started the host (Slurm, Open MPI, Kubernetes, Cloud TPU), which
then reads the coordinator, the count and the process id itself; else the cluster file, whose
first worker address is the coordinator's.

>>> join_plan({}, ("node1:23456", "node2:23456"), 1, named=True, detected=None)
<JoinPlan process 1 of 2 at node1:23456, from the cluster file>
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import GpkError
from .config import split_address

ADDRESSES_VARIABLE = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
PROCESSES_VARIABLE = "KERAS_DISTRIBUTION_NUM_PROCESSES"
PROCESS_ID_VARIABLE = "KERAS_DISTRIBUTION_PROCESS_ID"
KERAS_VARIABLES = (ADDRESSES_VARIABLE, PROCESSES_VARIABLE, PROCESS_ID_VARIABLE)
LOOPBACK_HOSTS = ("127.", "localhost", "::1")


@dataclass(frozen=True)
class JoinPlan:
    """The arguments one worker gives `jax.distributed.initialize`, and where they came from.

    `None` for the coordinator, the count and the id leaves them to JAX's own detection.
    """

    coordinator: str | None  # "host:port" of JAX's coordinator service, in worker 0
    processes: int | None  # how many processes join
    process_id: int | None  # this one's place among them
    bind: str | None  # where worker 0's coordinator listens; None: every interface (JAX's default)
    source: str  # "the cluster file", "KERAS_DISTRIBUTION_* variables", "JAX's slurm detection"

    def __repr__(self) -> str:
        where = f"process {self.process_id} of {self.processes} at {self.coordinator}"
        if self.coordinator is None:
            where = "process, count and coordinator detected"
        return f"<JoinPlan {where}, from {self.source}>"

    def arguments(self) -> dict[str, object]:
        """The keyword arguments of `jax.distributed.initialize` this plan sets."""
        given = dict(
            coordinator_address=self.coordinator,
            num_processes=self.processes,
            process_id=self.process_id,
            coordinator_bind_address=self.bind,
        )
        return {name: value for name, value in given.items() if value is not None}


def join_plan(
    env: Mapping[str, str],
    addresses: tuple[str, ...] | list[str],
    index: int,
    named: bool,
    detected: str | None,
) -> JoinPlan:
    """How worker `index` of the run at `addresses` joins, on a host whose environment is `env`
    and where JAX detects the launcher `detected` (its name, or None).

    >>> join_plan({}, ("127.0.0.1:4000", "127.0.0.1:4001"), 0, named=False, detected="slurm")
    <JoinPlan process 0 of 2 at 127.0.0.1:4000, from the local launcher>
    """
    addresses = tuple(addresses)
    if not named:  # a local run: loopback only, whatever launcher started this machine
        return JoinPlan(addresses[0], len(addresses), index, addresses[0], "the local launcher")
    given = [name for name in KERAS_VARIABLES if env.get(name)]
    if given:
        return _from_keras_variables(env, given, len(addresses), index)
    if detected:
        return JoinPlan(None, None, None, None, f"JAX's {detected} detection")
    return JoinPlan(addresses[0], len(addresses), index, _bind(addresses[0]), "the cluster file")


def _from_keras_variables(
    env: Mapping[str, str], given: list[str], workers: int, index: int
) -> JoinPlan:
    missing = [name for name in KERAS_VARIABLES if name not in given]
    if missing:
        raise GpkError(
            f"this host sets {', '.join(given)} but not {', '.join(missing)}; set all three "
            "(or none, to join by the cluster file)"
        )
    coordinator = env[ADDRESSES_VARIABLE].split(",")[0].strip()
    split_address(coordinator)
    processes = _whole(env, PROCESSES_VARIABLE)
    process_id = _whole(env, PROCESS_ID_VARIABLE)
    if (processes, process_id) != (workers, index):
        raise GpkError(
            f"{PROCESSES_VARIABLE}={processes} and {PROCESS_ID_VARIABLE}={process_id} disagree "
            f"with the cluster file's {workers} workers and --index {index}; make them agree"
        )
    return JoinPlan(
        coordinator, processes, process_id, _bind(coordinator), "KERAS_DISTRIBUTION_* variables"
    )


def _whole(env: Mapping[str, str], name: str) -> int:
    text = env[name].strip()
    if not text.isdigit():
        raise GpkError(f"{name}={text!r} is not a whole number; set it like {name}=0")
    return int(text)


def _bind(coordinator: str) -> str | None:
    """A loopback coordinator listens there only; any other on every interface of its port."""
    host = split_address(coordinator).host
    return coordinator if host.startswith(LOOPBACK_HOSTS) else None


def check_joined(plan: JoinPlan, processes: int, process_id: int, workers: int, index: int) -> None:
    """After joining: JAX's count and id must be the cluster file's, or the mesh would put this
    worker's devices and batch rows where another's belong."""
    if (processes, process_id) != (workers, index):
        raise GpkError(
            f"{plan.source} made this worker process {process_id} of {processes}, but the "
            f"cluster file lists {workers} workers and this is --index {index}; start each "
            "host's gpk worker with --index equal to its process id (under Slurm, "
            "--index $SLURM_PROCID)"
        )
