"""Turn whatever ended a run early into a status and one sentence a user can act on."""

from __future__ import annotations

import signal
from typing import Any

from ...errors import GpkError

# In a failed row's `extra`: the run was refused for what every run of its experiment shares (the
# data against the model), so a comparison starts no further run.
EVERY_RUN = "refused_for_every_run"
OOM_MARKERS = ("resourceexhausted", "out of memory", "oom when allocating", "failed to allocate")


def classify_exception(error: BaseException, phase: str) -> tuple[str, str]:
    """Status and reason for an exception raised inside a worker while it was in `phase`."""
    cause = error.__cause__ if error.__cause__ is not None else error
    text = f"{type(cause).__name__} {cause}".lower()
    if type(cause).__name__ == "MemoryBudgetExceeded":
        return "oom", str(cause)
    if isinstance(cause, MemoryError) or any(marker in text for marker in OOM_MARKERS):
        return "oom", f"ran out of memory while {phase}: {_first_line(cause)}"
    if isinstance(error, KeyboardInterrupt):
        return "cancelled", f"interrupted while {phase}"
    if isinstance(error, GpkError):
        return "failed", " ".join(str(error).split())  # already the sentence, fix included
    prefix = f"{error}: " if cause is not error else f"failed while {phase}: "
    return "failed", prefix + _first_line(cause)


def refused_for_every_run(row: Any) -> bool:
    """Whether `row` failed for what every run of its experiment shares: no other would train."""
    return not row.ok and bool(row.extra.get(EVERY_RUN))


def classify_exit(exitcode: int | None, phase: str) -> tuple[str, str]:
    """Status and reason for a worker that ended without reporting a result."""
    if exitcode is not None and exitcode < 0:
        name = _signal_name(-exitcode)
        hint = " (for example by the system's out-of-memory killer)" if -exitcode == 9 else ""
        return "crashed", f"the worker process was killed by {name}{hint} while {phase}"
    return "crashed", f"the worker process exited with code {exitcode} while {phase}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    # TensorFlow wraps errors raised while tracing as "in user code: ... <the real error>".
    line = lines[-1] if lines and lines[0].startswith("in user code") else (lines or [""])[0]
    text = f"{type(error).__name__}: {line}" if line else type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."
