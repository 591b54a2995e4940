"""One task of a run's Slurm job step: `srun ... python -m gpu_parallel_kit.cluster.slurm.task`.

srun starts one per process of the run and gives each the run on its stdin (one line: the job
`cluster/transfer.py` packs, base64). The task trains as process `SLURM_PROCID` of
`SLURM_NTASKS`; processes of a run find each other through the frameworks' own Slurm support
(JAX's cluster detection, TensorFlow's `SlurmClusterResolver`), entered by the backend record's
`step_entry`. Its events and result go back on its own stdout, one `EVENT_MARK` line each, which
srun forwards to the caller (`cluster/slurm/steps.py`) labelled with the task's number.
"""

from __future__ import annotations

import base64
import contextlib
import os
import pickle
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

EVENT_MARK = "gpk-event "  # the last (or only) line of one event
MORE_MARK = "gpk-more "  # a line of an event that goes on in the next one
# srun cuts longer lines of a task's output in pieces; an event is sent in lines shorter than this
LINE_CHARS = 900


class StepConnection:
    """The task's side of a run's connection: what a child's pipe does, over stdout."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def send(self, message: Any) -> None:
        text = base64.b64encode(pickle.dumps(message)).decode()
        pieces = [text[i : i + LINE_CHARS] for i in range(0, len(text), LINE_CHARS)] or [""]
        lines = [MORE_MARK + piece + "\n" for piece in pieces[:-1]]
        self.stream.write("".join(lines) + EVENT_MARK + pieces[-1] + "\n")
        self.stream.flush()

    def recv(self) -> Any:
        raise EOFError("a Slurm step trains one round; nothing more comes")

    def poll(self, timeout: float | None = None) -> bool:
        return False

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()


def encode_job(job: dict[str, Any]) -> bytes:
    """The job as the one line a step's tasks read on stdin."""
    return base64.b64encode(pickle.dumps(job)) + b"\n"


class EventLines:
    """A task's events, put back together from the lines of its stdout."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def read(self, text: str) -> tuple[bool, dict[str, Any] | None]:
        """(whether the line was part of an event, the event it completed or None)."""
        if text.startswith(MORE_MARK):
            self.pieces.append(text[len(MORE_MARK) :])
            return True, None
        if not text.startswith(EVENT_MARK):
            return False, None
        whole, self.pieces = "".join(self.pieces) + text[len(EVENT_MARK) :], []
        return True, pickle.loads(base64.b64decode(whole))


def list_node_devices(max_virtual: str, backend: str) -> int:
    """`python -m ...task --devices MAX BACKEND`: this node's devices as one event."""
    from ...runs.description.device_choice import list_devices

    events = StepConnection(os.fdopen(os.dup(1), "w", buffering=1))
    table = list_devices(int(max_virtual) or None, backend or None)
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    events.send({"event": "devices", "node": node, "rows": table.to_dict("records")})
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--devices"]:
        return list_node_devices(*sys.argv[2:4])
    # Events keep a stdout of their own: the run may filter fd 1 (gloo's chatter), and a filter's
    # thread must never hold back the result line written just before the process exits.
    events = os.fdopen(os.dup(1), "w", buffering=1)
    index = int(os.environ["SLURM_PROCID"])
    job = pickle.loads(base64.b64decode(sys.stdin.buffer.readline()))
    _import_the_worker(job)
    folder = tempfile.mkdtemp(prefix="gpk-step-")
    pid = os.fork()
    if pid == 0:
        _train(job, Path(folder), index, events)  # never returns
    _, status = os.waitpid(pid, 0)
    shutil.rmtree(folder, ignore_errors=True)
    if os.WIFSIGNALED(status):  # srun then says the task was killed by the same signal
        with contextlib.suppress(OSError, ValueError):  # SIGKILL's handler cannot be set
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def _import_the_worker(job: dict[str, Any]) -> None:
    """Import the run's entry point, and with it its framework, before the run is forked.

    A local run is forked from a server that imported its framework, and a fork's resident
    memory counts only the pages it touches; a process that imports TensorFlow itself keeps
    every page of the import resident, about 300 MiB more. Forked the same way, a task's peak
    memory is measured as a local run's is, and a comparison's rows stay comparable.
    """
    import cloudpickle

    from ...runs.processes.entry_points import entry_point, step_entry

    spec = cloudpickle.loads(job["spec"])
    entry_point(step_entry(spec.backend, spec.several_processes))


def _train(job: dict[str, Any], folder: Path, index: int, events: Any) -> None:
    from ...runs.processes.child_process import die_with_parent
    from ...runs.processes.entry_points import entry_point, step_entry
    from ..transfer import unpack_job

    die_with_parent()
    code = 0
    try:
        spec = unpack_job(job, folder)
        if os.environ.get("SLURM_STEP_GPUS") or os.environ.get("SLURM_JOB_GPUS"):
            spec = _planned_here(spec)  # the caller (a login node) may have no GPU
        connection = StepConnection(events)
        entry = entry_point(step_entry(spec.backend, spec.several_processes))
        if spec.several_processes:
            entry(spec, index, connection.send)
        else:
            entry(spec, connection)
    except BaseException:  # noqa: BLE001 - the caller reads the traceback on stderr
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def _planned_here(spec: Any) -> Any:
    """The run's device count planned on the GPUs Slurm bound to this task."""
    import dataclasses

    from ...runs.description.device_choice import discover_physical_devices
    from ..worker_devices import plan_on_this_host

    found = discover_physical_devices(spec.backend)
    return dataclasses.replace(spec, devices=plan_on_this_host(spec.devices, found))


if __name__ == "__main__":
    sys.exit(main())
