"""What to ask Slurm for (`SlurmCluster`), and the allocation the kit then holds
(`SlurmAllocation`): plain data and Slurm's own commands, no TensorFlow or JAX here.

>>> with gpk.SlurmCluster(nodes=2, gpus_per_node=8, partition="gpu", time="00:30:00") as slurm:
...     exp.compare(["single", "data", "multiworker"], devices=[1, 8], cluster=slurm)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ...errors import GpkError
from .commands import (
    GONE,
    NEVER_RUNS,
    JobState,
    hostnames,
    job_state,
    refusal,
    slurm_client,
    test_request,
)

JOB_NAME = "gpk-allocation"
STATE_POLL_S = 2.0
RELEASE_WAIT_S = 30.0


@dataclass(frozen=True)
class SlurmCluster:
    """What to ask Slurm for: one allocation that every run of a block shares.

    Use it as a context manager: the allocation is asked for when the block starts (its state
    shown while it waits in the queue), each run is a job step inside it, and it is given back
    when the block ends, when the kernel is interrupted, and when the kernel is killed. Passed
    as `cluster=` outside a block, it holds an allocation for that one call.

    Args:
        nodes: nodes to allocate; a run takes as many as its tasks need.
        gpus_per_node: GPUs on each node (`--gpus-per-node`); 0 on CPU nodes.
        partition: the partition (`--partition`); None: the cluster's default.
        time: the allocation's time limit (`--time`), e.g. `"00:30:00"`.
        account: the account to charge (`--account`); None: the user's default.
        qos: the quality of service (`--qos`); None: the default.
        tasks_per_node: task slots on each node (`--ntasks-per-node`), the most processes a run
            may start there; None: `gpus_per_node`, or 2 on CPU nodes.
        options: more `salloc` options, e.g. `("--constraint=a100", "--exclusive")`.

    Example:

    >>> gpk.SlurmCluster(nodes=2, gpus_per_node=8, partition="gpu", time="00:30:00")
    <SlurmCluster nodes=2 gpus_per_node=8 partition=gpu time=00:30:00>
    """

    nodes: int = 1  # nodes to allocate
    gpus_per_node: int = 0  # GPUs bound on each node; 0 on CPU nodes
    partition: str | None = None  # None: the cluster's default partition
    time: str = "01:00:00"  # the allocation's time limit, as Slurm writes it
    account: str | None = None  # None: the user's default account
    qos: str | None = None  # None: the default quality of service
    tasks_per_node: int | None = None  # None: gpus_per_node, or 2 on CPU nodes
    options: tuple[str, ...] = ()  # further salloc options, passed as they are
    _held: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("nodes", "gpus_per_node", "tasks_per_node"):
            value = getattr(self, name)
            least = 1 if name != "gpus_per_node" else 0
            if value is None and name == "tasks_per_node":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise GpkError(f"{name}={value!r} must be a whole number >= {least}, e.g. 2")
        if not isinstance(self.time, str) or not self.time:
            raise GpkError(f'time={self.time!r} must be a Slurm time limit, e.g. "00:30:00"')
        if isinstance(self.options, str):
            object.__setattr__(self, "options", tuple(self.options.split()))

    def __repr__(self) -> str:
        shown = [f"nodes={self.nodes}"]
        for name in ("gpus_per_node", "partition", "time", "account", "qos", "tasks_per_node"):
            value = getattr(self, name)
            if value:
                shown.append(f"{name}={value}")
        if self.options:
            shown.append(f"options={' '.join(self.options)}")
        return f"<SlurmCluster {' '.join(shown)}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # The request alone: the allocation it holds stays with the process that asked.
        fields = (self.nodes, self.gpus_per_node, self.partition, self.time, self.account)
        return (SlurmCluster, (*fields, self.qos, self.tasks_per_node, self.options))

    @property
    def slots_per_node(self) -> int:
        """Task slots on each node: the most processes a run may start there."""
        return self.tasks_per_node or self.gpus_per_node or 2

    def salloc_options(self) -> list[str]:
        """The options given to `salloc --no-shell`."""
        given = [
            f"--nodes={self.nodes}",
            f"--ntasks-per-node={self.slots_per_node}",
            f"--time={self.time}",
            f"--job-name={JOB_NAME}",
        ]
        if self.gpus_per_node:
            given.append(f"--gpus-per-node={self.gpus_per_node}")
        for name in ("partition", "account", "qos"):
            value = getattr(self, name)
            if value:
                given.append(f"--{name}={value}")
        return [*given, *self.options]

    def allocate(self, say: Callable[[str], None] | None = None) -> SlurmAllocation:
        """Ask Slurm for the allocation and wait until it is granted; the caller releases it."""
        say = say or _say
        why = slurm_client()
        if why:
            raise GpkError(f"{why}; run on a machine with Slurm's client, or drop cluster=")
        refused = test_request(self.salloc_options())
        if refused:
            raise refusal(refused, f"the allocation {self!r}")
        holder = subprocess.Popen(
            [sys.executable, "-m", __package__ + ".holder", str(os.getpid())]
            + self.salloc_options(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a Ctrl-C in the kernel is for the kernel, not the holder
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(holder.stdout), daemon=True)
        reader.start()
        allocation = SlurmAllocation(self, job_id="", nodes=(), holder=holder)
        try:
            return allocation.wait_granted(lines, say)
        except BaseException:
            allocation.release()
            raise

    @property
    def held(self) -> SlurmAllocation | None:
        """The allocation a `with` block of this request holds; None outside one."""
        return self._held.get("allocation")

    def __enter__(self) -> SlurmAllocation:
        if "allocation" in self._held:
            raise GpkError("this SlurmCluster already holds an allocation; use it, or a new one")
        allocation = self.allocate()
        self._held["allocation"] = allocation
        return allocation

    def __exit__(self, *exc: object) -> None:
        allocation = self._held.pop("allocation", None)
        if allocation is not None:
            allocation.release()

    @classmethod
    def from_text(cls, text: str) -> SlurmCluster | SlurmAllocation:
        """The request a flag writes: `slurm`, `slurm:nodes=2,partition=gpu,time=00:30:00`
        (`option=--exclusive` adds a salloc option), or `slurm:current` for the allocation this
        process runs in.

        >>> SlurmCluster.from_text("slurm:nodes=2,gpus_per_node=8,partition=gpu")
        <SlurmCluster nodes=2 gpus_per_node=8 partition=gpu time=01:00:00>
        """
        _, _, rest = text.partition(":")
        if rest.strip() == "current":
            return cls.current()
        given: dict[str, Any] = {}
        options: list[str] = []
        for pair in filter(None, (p.strip() for p in rest.split(","))):
            name, equals, value = pair.partition("=")
            names = [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]
            if not equals or name not in (*names, "option"):
                raise GpkError(
                    f"{pair!r} in {text!r} is not name=value of a SlurmCluster field; use "
                    f"{', '.join(n for n in names if n != 'options')} or option, e.g. "
                    "slurm:nodes=2,partition=gpu,time=00:30:00"
                )
            if name == "option":
                options.append(value)
            elif name in ("nodes", "gpus_per_node", "tasks_per_node"):
                if not value.isdigit():
                    raise GpkError(f"{name}={value!r} in {text!r} must be a whole number, e.g. 2")
                given[name] = int(value)
            else:
                given[name] = value
        return cls(**given, options=tuple(options))

    def list_devices(self, max_virtual: int | None = None, backend: str | None = None) -> Any:
        """`gpk.list_devices(cluster=...)`: the devices of an allocation held for this call."""
        with held_allocation(self) as allocation:
            return allocation.list_devices(max_virtual, backend)

    @staticmethod
    def current() -> SlurmAllocation:
        """The allocation this process runs inside (a notebook started under `salloc` or
        `sbatch`): used, never released, by the kit."""
        job = os.environ.get("SLURM_JOB_ID")
        if not job:
            raise GpkError(
                "this process runs in no Slurm allocation (SLURM_JOB_ID is not set); start it "
                "under salloc or sbatch, or use gpk.SlurmCluster(...) to ask for one"
            )
        nodes = hostnames(os.environ.get("SLURM_JOB_NODELIST", ""))
        count = len(nodes) or int(os.environ.get("SLURM_JOB_NUM_NODES", "1"))
        tasks = os.environ.get("SLURM_NTASKS_PER_NODE") or os.environ.get("SLURM_NTASKS")
        gpus = os.environ.get("SLURM_GPUS_PER_NODE", "0").rsplit(":", 1)[-1]
        request = SlurmCluster(
            nodes=count,
            gpus_per_node=int(gpus) if gpus.isdigit() else 0,
            partition=os.environ.get("SLURM_JOB_PARTITION"),
            tasks_per_node=int(tasks) if tasks and tasks.isdigit() else None,
        )
        return SlurmAllocation(request, job_id=job, nodes=nodes, holder=None)


@dataclass(frozen=True)
class SlurmAllocation:
    """One Slurm allocation the runs of a block share: its job id and the nodes granted.

    Pass it as `cluster=` to `Experiment.run` and `compare`: each run is a job step inside it.
    """

    request: SlurmCluster  # what was asked for
    job_id: str  # Slurm's job id of the allocation
    nodes: tuple[str, ...]  # host names granted
    holder: Any = field(default=None, repr=False, compare=False)  # None: not the kit's to release

    def __repr__(self) -> str:
        where = ",".join(self.nodes) or "no nodes yet"
        return f"<SlurmAllocation job {self.job_id} on {where} ({self.request!r})>"

    def __reduce__(self) -> tuple[Any, ...]:
        # A step's tasks get the record without the process that holds it.
        return (SlurmAllocation, (self.request, self.job_id, self.nodes, None))

    @property
    def slots_per_node(self) -> int:
        return self.request.slots_per_node

    def state(self) -> JobState:
        """What squeue says of the allocation now."""
        return job_state(self.job_id)

    def nodes_for(self, tasks: int) -> int:
        """How many of the allocation's nodes a step of `tasks` processes takes, or one sentence
        when it holds too few task slots."""
        slots = self.slots_per_node
        nodes = -(-tasks // slots)
        if nodes > max(len(self.nodes), self.request.nodes):
            raise GpkError(
                f"a run of {tasks} processes needs {nodes} nodes of {slots} task slots, but the "
                f"Slurm allocation {self.job_id} holds {max(len(self.nodes), 1)}; ask for more "
                "nodes= or tasks_per_node= in SlurmCluster, or run fewer workers"
            )
        return nodes

    def list_devices(self, max_virtual: int | None = None, backend: str | None = None) -> Any:
        """One row per device on each of the allocation's nodes, as `gpk.list_devices()` lists
        them there (a step of one task per node), with the node's name."""
        from .steps import devices_on_nodes

        return devices_on_nodes(self, max_virtual, backend)

    def release(self) -> None:
        """Give the allocation back (only one the kit asked for); waits until Slurm lets it go.

        An allocation that ended on its own (cancelled, past its time limit) may still be
        completing; this waits, within `RELEASE_WAIT_S`, until squeue lists it no more.
        """
        holder = self.holder
        if holder is None:
            return
        if holder.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                holder.stdin.write("release\n")
                holder.stdin.flush()
                holder.stdin.close()
            try:
                holder.wait(RELEASE_WAIT_S)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait()
        if self.job_id:  # the holder cancelled it; make sure, once more, before returning
            from .commands import cancel

            cancel(self.job_id)
            deadline = time.monotonic() + RELEASE_WAIT_S
            while job_state(self.job_id).state != GONE and time.monotonic() < deadline:
                time.sleep(STATE_POLL_S / 4)

    def __enter__(self) -> SlurmAllocation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def wait_granted(self, lines: list[str], say: Callable[[str], None]) -> SlurmAllocation:
        """Follow the holder's word and squeue until the allocation is granted."""
        job, shown, polled = "", "", 0.0
        while True:
            for line in list(lines):
                word, _, value = line.strip().partition(" ")
                if word == "refused":
                    raise refusal(value, f"the allocation {self.request!r}")
                if word == "job":
                    job = value
                if word == "granted":
                    state = job_state(value)
                    nodes = hostnames(state.nodes)
                    say(f"Slurm job {value}: granted on {', '.join(nodes) or state.nodes}")
                    return dataclasses.replace(self, job_id=value, nodes=nodes)
            if self.holder.poll() is not None and not any(
                line.startswith("granted") for line in lines
            ):
                raise GpkError(
                    f"the process holding the Slurm request for {self.request!r} ended without "
                    "an allocation; look at `squeue --me`, then try again"
                )
            if job and time.monotonic() - polled > STATE_POLL_S:
                polled = time.monotonic()
                state = job_state(job)
                if state.reason in NEVER_RUNS:
                    name, meaning = NEVER_RUNS[state.reason]
                    raise GpkError(
                        f"Slurm will never start the allocation {self.request!r}: it asks for "
                        f"{meaning} ({state.reason}); change {name}"
                    )
                now = f"Slurm job {job}: {state.state.lower()} ({state.reason})"
                if state.state not in (GONE, "RUNNING") and now != shown:
                    say(now)
                    shown = now
            time.sleep(0.1)


def _say(line: str) -> None:
    print(line, flush=True)


SLURM_PREFIX = "slurm"


def is_slurm(cluster: Any) -> bool:
    """Whether `cluster=` names a Slurm request or allocation (not a named cluster's file): a
    record, or the text form `slurm:...` of the `--cluster` flag."""
    if isinstance(cluster, str):
        return cluster == SLURM_PREFIX or cluster.startswith(SLURM_PREFIX + ":")
    return isinstance(cluster, SlurmCluster | SlurmAllocation)


def slurm_record(cluster: Any) -> SlurmCluster | SlurmAllocation:
    """The record `cluster=` names (`is_slurm` is true of it)."""
    return SlurmCluster.from_text(cluster) if isinstance(cluster, str) else cluster


@contextlib.contextmanager
def held_allocation(cluster: SlurmCluster | SlurmAllocation | None) -> Iterator[Any]:
    """The allocation runs use: the one given, the one a `with` block of the request holds, or
    one asked for now and released when the calling run or comparison ends."""
    if cluster is None or isinstance(cluster, SlurmAllocation):
        yield cluster
    elif cluster.held is not None:
        yield cluster.held
    else:
        with cluster as allocation:
            yield allocation
