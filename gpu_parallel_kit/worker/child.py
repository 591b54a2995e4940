"""The shell every run's child process shares, whatever its backend: own process group, one
result sent to the parent, no interpreter teardown.

`body(spec, emit, report_and_exit, next_round)` runs the run; it may call `report_and_exit`
itself (from `fit`'s last callback, so `fit`'s input-iterator teardown is never waited for), and
`next_round` waits for the caller's word when the process trains several rounds
(`runs/scheduling/resident_rounds.py`).
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..runs.description.run_spec import RunSpec
from ..runs.description.tuning_rules import Tuned, warmup_in_executions
from ..runs.processes.child_process import parent_emitter, parent_word
from ..runs.results.run_result import RunResult
from .measuring.recorder import StepRecorder

if TYPE_CHECKING:
    import keras


@dataclass(frozen=True)
class Finished:
    """What a run knows when training is done, beside the recorder's figures and the engine's."""

    device_names: tuple[str, ...]
    all_reduce: str
    steps_per_epoch: int
    startup_s: float
    memory: dict[str, int]
    memory_source: str
    base_learning_rate: float | None
    learning_rate: float | None


def finished_result(
    spec: RunSpec,
    base: dict[str, Any],
    done: Finished,
    recorder: StepRecorder,
    tuned: Tuned,
    model: keras.Model,
    engine_fields: Callable[[float | None], dict[str, Any]],
) -> RunResult:
    """A finished run's row, the same for both backends: the recorder's step figures, what
    tune chose (and the XLA setting Keras applied), and the engine's own fields."""
    summary = recorder.summary()
    step_time = summary["step_time_s"]
    fields = engine_fields(step_time)
    # An engine that knows better than the plan (a pipeline's M chosen by "auto") says so.
    base = {**base, **{name: fields.pop(name) for name in list(fields) if name in base}}
    fields["extra"].update(
        tuned={**tuned.to_dict(), "jit_compile": bool(model.jit_compile)},
        step_time_method=recorder.method(),
    )
    return RunResult(
        **base,
        status="ok",
        device_names=done.device_names,
        all_reduce=done.all_reduce,
        steps_per_epoch=done.steps_per_epoch,
        startup_s=done.startup_s,
        throughput_samples_s=spec.global_batch / step_time if step_time else None,
        peak_memory_bytes=done.memory,
        memory_source=done.memory_source,
        base_learning_rate=done.base_learning_rate,
        learning_rate=done.learning_rate,
        **summary,
        **fields,
    )


def tuned_recorder(
    emit: Callable[..., None], tuned: Tuned, warmup: int, total: int, steps_per_epoch: int
) -> StepRecorder:
    """The run's recorder: warm-up rounded to whole executions of tune's steps per execution."""
    return StepRecorder(
        total,
        emit,
        warmup_in_executions(warmup, tuned.steps_per_execution, total),
        steps_per_epoch,
        tuned.steps_per_execution,
    )


NextRound = Callable[[], bool]
Body = Callable[[RunSpec, Callable[..., None], Callable[[RunResult], None], NextRound], RunResult]


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
        report_and_exit(body(spec, emit, report_and_exit, parent_word(connection)))
    except BaseException:  # noqa: BLE001 - the parent turns a missing result into a row
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(OSError):
            connection.close()
        # Skip interpreter teardown: after TensorFlow or JAX it costs a second or more.
        os._exit(code)
