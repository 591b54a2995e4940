"""Slurm's own commands, asked and answered as plain data, and its refusals as one sentence.

Every call is bounded and never raises for Slurm's answer: a job Slurm no longer knows is a state
of its own ("GONE"), and a refusal becomes a `GpkError` naming the `SlurmCluster` field to change.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from ...errors import GpkError

CALL_TIMEOUT_S = 20.0
GONE = "GONE"  # squeue no longer lists the job: ended, cancelled or never existed

# Slurm's refusals, each with the field of `SlurmCluster` that answers it.
_REFUSALS = (
    ("invalid partition", "partition"),
    ("invalid account", "account"),
    ("invalid qos", "qos"),
    ("qos", "qos"),
    ("account", "account"),
    ("requested node configuration is not available", "nodes, gpus_per_node or tasks_per_node"),
    ("node count specification invalid", "nodes"),
    ("more processors requested than permitted", "tasks_per_node (the tasks a step may start)"),
    ("requested time limit is invalid", "time"),
    ("time limit", "time"),
    ("--time", "time"),
    ("invalid generic resource", "gpus_per_node"),
    ("invalid gres", "gpus_per_node"),
    ("partition", "partition"),
)


# Reasons a pending job waits for ever: (the field to change, what Slurm means).
NEVER_RUNS = {
    "PartitionNodeLimit": ("nodes", "more nodes than the partition allows"),
    "PartitionTimeLimit": ("time", "a longer time than the partition allows"),
    "PartitionConfig": ("the request", "a request the partition's configuration cannot meet"),
    "PartitionDown": ("partition", "the partition is down"),
    "PartitionInactive": ("partition", "the partition is inactive"),
    "BadConstraints": ("options", "constraints no node meets"),
    "InvalidAccount": ("account", "an account Slurm does not know"),
    "InvalidQOS": ("qos", "a QOS Slurm does not know"),
    "AssocMaxNodesPerJobLimit": ("nodes", "more nodes than the account may use"),
    "AssocMaxWallDurationPerJobLimit": ("time", "a longer time than the account may use"),
    "QOSMaxNodePerJobLimit": ("nodes", "more nodes than the QOS allows"),
    "QOSMaxWallDurationPerJobLimit": ("time", "a longer time than the QOS allows"),
}


@dataclass(frozen=True)
class JobState:
    """What squeue says of one job."""

    state: str  # PENDING, RUNNING, COMPLETING, ... or GONE
    reason: str  # why it waits or ended ("Resources", "TimeLimit", "None")
    nodes: str  # its node list, compressed as Slurm writes it ("node[1-2]")


@dataclass(frozen=True)
class Partition:
    """One partition as `sinfo` lists it: where a `SlurmCluster` may ask for nodes."""

    name: str
    default: bool  # the partition a request without partition= goes to
    up: bool
    nodes: int
    cpus_per_node: int  # the most any of its nodes has
    gpus_per_node: int  # the most any of its nodes has; 0 without GPUs
    node_names: str  # Slurm's compressed list, e.g. "node[1-4]"

    def __str__(self) -> str:
        gpus = f"{self.gpus_per_node} GPUs and " if self.gpus_per_node else ""
        state = "" if self.up else ", down"
        return (
            f"Slurm {self.name}: {self.nodes} node(s) ({self.node_names}), "
            f"{gpus}{self.cpus_per_node} CPUs each{state}"
        )


# sinfo's columns, one line per group of alike nodes: partition (default marked "*"),
# availability, node count, CPUs per node, generic resources, node names.
SINFO_FORMAT = "%P|%a|%D|%c|%G|%N"


def parse_partitions(text: str) -> list[Partition]:
    """`sinfo -h -o SINFO_FORMAT`'s lines as partitions, in sinfo's order, a partition's
    groups of nodes merged.

    >>> parse_partitions("gpu*|up|4|64|gpu:a100:8(S:0-1)|node[1-4]")[0].gpus_per_node
    8
    """
    found: dict[str, Partition] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 6:
            continue
        name, available, nodes, cpus, gres, names = fields
        default = name.endswith("*")
        name = name.rstrip("*")
        gpus = sum(int(n) for n in re.findall(r"gpu(?::[^:,()]+)?:(\d+)", gres))
        group = Partition(
            name, default, available == "up", _count(nodes), _count(cpus), gpus, names
        )
        if name in found:
            kept = found[name]
            group = Partition(
                name,
                kept.default or default,
                kept.up or group.up,
                kept.nodes + group.nodes,
                max(kept.cpus_per_node, group.cpus_per_node),
                max(kept.gpus_per_node, group.gpus_per_node),
                f"{kept.node_names},{names}",
            )
        found[name] = group
    return list(found.values())


def partitions() -> list[Partition]:
    """The partitions this machine's Slurm offers; none without a Slurm client."""
    if slurm_client() is not None or shutil.which("sinfo") is None:
        return []
    answer = call("sinfo", "-h", "-o", SINFO_FORMAT)
    return parse_partitions(answer.stdout) if answer.returncode == 0 else []


def _count(text: str) -> int:
    """sinfo's count ("64", or "64+" where nodes differ): its number."""
    digits = re.match(r"\d+", text.strip())
    return int(digits.group()) if digits else 0


def slurm_client() -> str | None:
    """Why no Slurm client can be used here, or None when `srun`, `salloc` and `squeue` can."""
    missing = [name for name in ("salloc", "srun", "squeue", "scancel") if not shutil.which(name)]
    if missing:
        return f"no Slurm client on this machine ({', '.join(missing)} not found)"
    return None


def call(*command: str, timeout_s: float = CALL_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run one Slurm command; its output, never an exception for its exit code."""
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return subprocess.CompletedProcess(command, 1, "", f"{command[0]}: {error}")


def job_state(job_id: str) -> JobState:
    """The job's state, reason and nodes; GONE once squeue no longer lists it."""
    answer = call("squeue", "-h", "-j", job_id, "-o", "%T|%r|%N")
    line = answer.stdout.strip().splitlines()
    if answer.returncode != 0 or not line:
        return JobState(GONE, "", "")
    state, reason, nodes = (line[0].split("|") + ["", ""])[:3]
    return JobState(state, reason, nodes)


def hostnames(nodes: str) -> tuple[str, ...]:
    """Slurm's compressed node list ("node[1-2]") as host names, through `scontrol`."""
    if not nodes:
        return ()
    answer = call("scontrol", "show", "hostnames", nodes)
    names = tuple(answer.stdout.split())
    return names or (nodes,)


def cancel(target: str) -> None:
    """scancel a job ("12") or a step ("12.3"); quiet when it has already ended."""
    call("scancel", target)


def step_ids(job_id: str, name: str) -> list[str]:
    """The ids ("12.3") of the job's steps named `name`."""
    answer = call("squeue", "-h", "-s", "-j", job_id, "-o", "%i|%j")
    steps = (line.split("|", 1) for line in answer.stdout.splitlines() if "|" in line)
    return [step for step, step_name in steps if step_name == name]


def test_request(options: list[str]) -> str | None:
    """Slurm's own answer to whether it could ever grant `options` (`sbatch --test-only`): its
    refusal, or None when it could (or no sbatch is here to ask)."""
    if shutil.which("sbatch") is None:
        return None
    answer = call("sbatch", "--test-only", "--wrap=true", *options)
    if answer.returncode == 0:
        return None
    return answer.stderr.strip() or answer.stdout.strip() or "no reason given"


def refusal(message: str, request: str) -> GpkError:
    """Slurm's refusal of `request` ("the allocation nodes=2 ...") as one sentence naming the
    field to change."""
    said = _said(message)
    lowered = said.lower()
    field = next((f for key, f in _REFUSALS if key in lowered), "the request")
    return GpkError(f"Slurm refused {request}: {said}; change {field}")


def _said(message: str) -> str:
    """Slurm's own reason from its error lines, without the command's prefixes."""
    lines = [line.strip() for line in re.split(r"\n| \| ", message) if line.strip()]
    errors = [line for line in lines if "error" in line.lower()] or lines or ["no reason given"]
    said = errors[-1]
    said = re.sub(r"^(salloc|srun|sbatch|slurmstepd)(: error)?:\s*", "", said)
    said = re.sub(r"^allocation failure:\s*", "", said)
    said = re.sub(
        r"^(error:\s*)?(Job submit/allocate failed|Unable to allocate resources):\s*", "", said
    )
    said = re.sub(r"^Unable to create step for job \d+:\s*", "", said)
    return said.rstrip(".")
