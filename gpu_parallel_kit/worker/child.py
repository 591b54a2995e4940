"""The shell every run's child process shares, whatever its backend: own process group, one
result sent to the parent, no interpreter teardown.

`body(spec, emit, report_and_exit)` runs the run; it may call `report_and_exit` itself (from
`fit`'s last callback, so `fit`'s input-iterator teardown is never waited for).
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable
from typing import Any

from ..runs.process import parent_emitter
from ..runs.results import RunResult
from ..runs.spec import RunSpec

Body = Callable[[RunSpec, Callable[..., None], Callable[[RunResult], None]], RunResult]


def run_child(spec: RunSpec, connection: Any, body: Body) -> None:
    """Run `body` and send its result; always ends the process, never returns."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # own process group: the parent can kill the run and all it started

    emit = parent_emitter(connection)

    def report_and_exit(result: RunResult) -> None:
        emit(event="result", result=result.to_dict())
        with contextlib.suppress(OSError):
            connection.close()
        os._exit(0)

    code = 0
    try:
        report_and_exit(body(spec, emit, report_and_exit))
    except BaseException:  # noqa: BLE001 - the parent turns a missing result into a row
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(OSError):
            connection.close()
        # Skip interpreter teardown: after TensorFlow or JAX it costs a second or more.
        os._exit(code)
