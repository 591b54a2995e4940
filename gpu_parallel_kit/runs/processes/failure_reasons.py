"""Turn whatever ended a run early into a status and one sentence a user can act on."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, NamedTuple

from ...errors import GpkError

if TYPE_CHECKING:
    from ..results.run_result import RunResult

# In a failed row's `extra`: the run was refused for what every run of its experiment shares (the
# data against the model), so a comparison starts no further run.
EVERY_RUN = "refused_for_every_run"
OOM_MARKERS = ("resourceexhausted", "out of memory", "oom when allocating", "failed to allocate")


class Failure(NamedTuple):
    """How a run ended early: its row's status and one sentence saying why."""

    status: str  # "oom", "cancelled", "failed" or "crashed"
    reason: str  # what happened and where, for the user


def classify_exception(error: BaseException, phase: str) -> Failure:
    """Status and reason for an exception raised inside a worker while it was in `phase`."""
    cause = error.__cause__ if error.__cause__ is not None else error
    text = f"{type(cause).__name__} {cause}".lower()
    if type(cause).__name__ == "MemoryBudgetExceeded":
        return Failure("oom", str(cause))
    if isinstance(cause, MemoryError) or any(marker in text for marker in OOM_MARKERS):
        return Failure("oom", f"ran out of memory while {phase}: {_first_line(cause)}")
    if isinstance(error, KeyboardInterrupt):
        return Failure("cancelled", f"interrupted while {phase}")
    if isinstance(error, GpkError):
        # already the sentence, fix included
        return Failure("failed", " ".join(str(error).split()))
    prefix = f"{error}: " if cause is not error else f"failed while {phase}: "
    return Failure("failed", prefix + _first_line(cause))


def refused_for_every_run(row: RunResult) -> bool:
    """Whether `row` failed for what every run of its experiment shares: no other would train."""
    return not row.ok and bool(row.extra.get(EVERY_RUN))


def classify_exit(exitcode: int | None, phase: str) -> Failure:
    """Status and reason for a worker that ended without reporting a result."""
    if exitcode is not None and exitcode < 0:
        name = _signal_name(-exitcode)
        hint = " (for example by the system's out-of-memory killer)" if -exitcode == 9 else ""
        return Failure("crashed", f"the worker process was killed by {name}{hint} while {phase}")
    return Failure("crashed", f"the worker process exited with code {exitcode} while {phase}")


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
