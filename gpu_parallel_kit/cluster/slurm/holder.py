"""The process that owns a Slurm allocation for the kit and gives it back, however its parent ends.

Started by `SlurmCluster.__enter__` as `python -m gpu_parallel_kit.cluster.slurm.holder`, with
`salloc`'s options as arguments. It asks for the allocation with `salloc --no-shell` and tells its
parent, one line each on stdout, `job ID` (queued), `granted ID` or `refused MESSAGE`. It then
waits; when its parent closes its stdin, writes `release`, ends (its stdin then closes) or is
killed (the kernel sends this process SIGTERM, PR_SET_PDEATHSIG), it cancels the allocation with
`scancel` and exits. A notebook kernel killed with SIGKILL thus leaves no allocation behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import re
import signal
import subprocess
import sys
import threading

_PR_SET_PDEATHSIG = 1
_QUEUED = re.compile(r"(?:Pending|Granted) job allocation (\d+)")
_GRANTED = re.compile(r"Granted job allocation (\d+)")


def main(arguments: list[str]) -> int:
    parent = int(arguments[0])
    _term_with_parent()
    if os.getppid() != parent:  # the parent died before the line above: nobody to hold it for
        return 0
    released = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda *_: released.set())
    threading.Thread(target=_watch_parent, args=(released,), daemon=True).start()
    salloc = subprocess.Popen(
        ["salloc", "--no-shell", *arguments[1:]],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    job: list[str] = []
    said: list[str] = []
    threading.Thread(target=_read_salloc, args=(salloc, job, said), daemon=True).start()
    while not released.wait(0.2):
        if salloc.poll() is not None:
            break
    if not released.is_set():  # salloc ended: granted (--no-shell returns then) or refused
        salloc.wait()
        if salloc.returncode != 0 or not any(_GRANTED.search(line) for line in said):
            _say("refused " + " | ".join(said[-3:]).replace("\n", " "))
            _release(job)
            return 1
        _say(f"granted {job[0]}")
        released.wait()
    with contextlib.suppress(OSError):
        salloc.kill()
    _release(job)
    return 0


def _read_salloc(salloc: subprocess.Popen, job: list[str], said: list[str]) -> None:
    for line in salloc.stderr:
        said.append(line.strip())
        queued = _QUEUED.search(line)
        if queued and not job:
            job.append(queued.group(1))
            _say(f"job {job[0]}")


def _watch_parent(released: threading.Event) -> None:
    """`release` on stdin, or stdin closed (the parent ended, however), releases."""
    for line in sys.stdin:
        if line.strip() == "release":
            break
    released.set()


def _release(job: list[str]) -> None:
    if job:
        subprocess.run(["scancel", job[0]], capture_output=True, timeout=30, check=False)


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        print(line, flush=True)


def _term_with_parent() -> None:
    """Linux: SIGTERM, which this process handles, when the parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
