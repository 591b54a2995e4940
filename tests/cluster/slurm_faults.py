"""What the Slurm tests share: whether Slurm answers here, squeue's view, and a progress display
that does something to the run (kill a task, cancel its step) once it trains."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

from gpu_parallel_kit.cluster.slurm.commands import slurm_client

TASK_MODULE = "gpu_parallel_kit.cluster.slurm.task"


def why_no_slurm() -> str | None:
    """Why these tests cannot reach Slurm here, or None when they can."""
    missing = slurm_client()
    if missing:
        return f"{missing}; .ci/slurm installs and starts a one-node Slurm"
    answer = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    if answer.returncode != 0 or not any(
        state.startswith(("idle", "mix", "alloc")) for state in answer.stdout.split()
    ):
        said = (answer.stderr or answer.stdout).strip() or "no node"
        return f"Slurm's controller answers no usable node ({said}); run .ci/slurm as root"
    return None


# Marking the one node down ends every job on it: that test holds this lock alone, every other
# Slurm test shares it, so two suites on one machine never end each other's allocations.
NODE_LOCK = "/tmp/gpk-slurm-node.lock"


@contextlib.contextmanager
def node_lock(alone: bool) -> Iterator[None]:
    with open(NODE_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def jobs() -> list[str]:
    """Every job squeue lists."""
    answer = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
    return answer.stdout.split()


def steps(job_id: str) -> list[str]:
    """The job's running steps, as squeue lists them."""
    answer = subprocess.run(
        ["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], capture_output=True, text=True
    )
    return [step for step in answer.stdout.split() if not step.endswith((".batch", ".extern"))]


def task_processes(job_id: str) -> list[int]:
    """Process ids of the training processes (each task's forked child) of the job's steps."""
    answer = subprocess.run(["pgrep", "-f", TASK_MODULE], capture_output=True, text=True)
    pids = [int(pid) for pid in answer.stdout.split()]
    parents = {pid: _parent(pid) for pid in pids}
    return [pid for pid in pids if parents[pid] in parents and _job_of(pid) == job_id]


def _job_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            variables = environ.read().split(b"\0")
    except OSError:
        return ""
    found = [v for v in variables if v.startswith(b"SLURM_JOB_ID=")]
    return found[0].split(b"=", 1)[1].decode() if found else ""


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


class WhenTraining:
    """A run's progress display (what `Experiment(progress=...)` makes per run) that calls
    `act` once, at the first progress event of training, and shows nothing."""

    def __init__(self, act: Callable[[], None]) -> None:
        self.act = act
        self.done = False

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("event") == "progress" and not self.done:
            self.done = True
            self.act()

    def close(self, result: Any) -> None:
        pass


def when_training(act: Callable[[], None]) -> Callable[[Any], WhenTraining]:
    """`progress=` for an Experiment: `act()` once, when its first run trains."""
    display = WhenTraining(act)
    return lambda spec: display


def kill_one_task(job_id: str) -> Callable[[], None]:
    """SIGKILL the training process of the last task of the job's step."""
    return lambda: os.kill(max(task_processes(job_id)), signal.SIGKILL)


def cancel_steps(job_id: str) -> Callable[[], None]:
    def act() -> None:
        for step in steps(job_id):
            subprocess.run(["scancel", step], check=False)

    return act
