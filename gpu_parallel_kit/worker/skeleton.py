"""One run, whatever its backend: the phases, the finished row, and a failure turned into a row.

A backend plugs in as a `BackendRun` (`worker/tensorflow/run.py`, `worker/jax/run.py`), which
asks the strategy's record for its worker class (a TensorFlow engine, a JAX strategy) and
delegates to it. The skeleton never asks which strategy or backend it runs: it sets up the
devices, prepares the data, builds the model under the strategy, trains, measures and describes,
in that order, naming each phase so a failure or a timeout says where the run was.

No TensorFlow or JAX is imported here; the backend's run module imports its own.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import time
import traceback
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import GpkError
from ..runs import gate
from ..runs.comm_reuse import MeasuredComm, measured_in
from ..runs.failures import classify_exception
from ..runs.results import RunResult
from ..runs.spec import RunSpec
from ..version import __version__
from .budget import MemoryBudgetExceeded
from .child import Finished, finished_result, tuned_recorder
from .lr_schedule import apply_run_rule
from .rounds import Rounds
from .stats import warmup_steps

if TYPE_CHECKING:
    import keras

    from ..runs.tuning import Tuned
    from .recorder import StepRecorder

# Failures that already are the user's sentence: the worker's stderr needs no traceback of them.
EXPECTED = (GpkError, MemoryBudgetExceeded)


class BackendRun(Protocol):
    """What one backend does for one run; the skeleton calls these in order."""

    def versions(self) -> dict[str, str]:
        """Versions of the backend's own libraries (tensorflow or jax, keras), for the row."""

    def set_up_devices(self) -> tuple[str, ...]:
        """Start the backend on the run's devices (and its determinism); their names."""

    def prepare_data(self) -> int:
        """The run's batches, in the kit's seeded order; the steps per epoch."""

    def build(self, steps_per_epoch: int, total: int, warmup: int) -> tuple[keras.Model, Tuned]:
        """The user's model, seeded, compiled with tune's settings and built under the strategy;
        and those settings."""

    def scope(self) -> contextlib.AbstractContextManager:
        """Where the model's optimizer and variables live: the strategy's scope."""

    def watch(self, recorder: StepRecorder, model: keras.Model) -> None:
        """Anything that follows training step by step (validation), before it starts."""

    def train(self, model: keras.Model, recorder: StepRecorder) -> None:
        """Check the memory budget, then train every step of every epoch, feeding `recorder`."""

    def prepare_measure(self, model: keras.Model) -> None:
        """Before the first timed step: trace or compile what `measure` times after training,
        so the comparison's next run waits only for the timing (a failure is kept for then)."""

    def measure(self, model: keras.Model) -> None:
        """After training: what the strategy measures apart (communication), weights unchanged."""

    def peak_memory(self) -> tuple[dict[str, int], str]:
        """Peak bytes per device and what that figure is."""

    def describe(self) -> str:
        """The communication the strategy uses, in a few words ("" for none)."""

    def result_fields(self, model: keras.Model, step_time_s: float | None) -> dict[str, Any]:
        """RunResult fields only this strategy measures, `extra` among them."""

    def lend_communication(self, measured: MeasuredComm) -> None:
        """Later rounds in this process report what its first round measured, as a later
        round in a process of its own would (`runs/comm_reuse.py`)."""


def run_in_this_process(
    spec: RunSpec,
    emit: Callable[..., None],
    report_and_exit: Callable[[RunResult], None] | None,
    backend: BackendRun,
    next_round: Callable[[], bool] | None = None,
) -> RunResult:
    """Run one spec here and return its result; failures become a result, not an exception.

    With `report_and_exit`, a finished `fit` reports from its last callback and the process ends
    there: the weights and timestamps are final, and fit's input-iterator teardown that follows
    costs 1-7 s on two cores for nothing.

    A spec of several rounds in this process (`runs/resident.py`) reports each round but the
    last at its end, waits there for `next_round`'s word, and trains the next from the state the
    first started from (`worker/rounds.py`).
    """
    if spec.more_rounds_here and next_round is None:
        raise ValueError("a run of several rounds in one process needs the caller's next_round")
    start = time.perf_counter()
    phase = "setting up devices"
    base = base_fields(spec, backend.versions())
    rounds: Rounds | None = None

    def enter(name: str, **details: Any) -> None:
        nonlocal phase
        phase = name
        emit(event="phase", phase=name, **details)

    try:
        if spec.prepares_together:  # beside the comparison's other first rounds: nobody times
            gate.share(spec.gate, spec.timeout_s)
            emit(event="sharing")
        enter("setting up devices")
        warnings.filterwarnings("ignore", module="keras")
        device_names = backend.set_up_devices()
        enter("preparing the data")
        steps = backend.prepare_data()
        total = steps * spec.training.epochs
        warmup = warmup_steps(spec.training.warmup_steps, total)
        enter("building the model")
        model, tuned = backend.build(steps, total, warmup)
        with backend.scope():
            base_lr, learning_rate = apply_run_rule(model.optimizer, spec, steps)
        rounds = Rounds(spec, model)

        def at_gate() -> float:
            rounds.keep_first_state()
            backend.prepare_measure(model)  # beside the set-up, not after training
            if spec.prepares_together:  # its warm-up is part of the preparing
                return 0.0
            return gate.pass_through(spec.gate)

        def at_end_of_warmup() -> float:
            """A run prepared beside the others: its share given back, its turn, the gate."""
            gate.unshare()
            if next_round is None or not next_round():
                os._exit(0)  # the caller has gone or stopped the comparison: nothing to report
            waited = gate.pass_through(spec.gate)
            emit(event="turn")  # its timeout counts from here (runner._Watch)
            return waited

        def new_recorder() -> StepRecorder:
            made = tuned_recorder(emit, tuned, warmup, total, steps)
            backend.watch(made, model)
            # The last run of the caller may still be measuring beside this one: the recorder
            # waits for it before the first timed step (runs/gate.py), so this run's set-up
            # overlaps it. A first round of several keeps the state it starts from.
            made.gate = at_gate
            if report_and_exit is not None:
                made.on_train_end = lambda: report_and_exit(finish())
            if rounds.more:
                made.next_round = round_after
            if spec.prepares_together and not rounds.later:
                made.after_warmup = at_end_of_warmup
            return made

        def finish() -> RunResult:
            nonlocal phase
            phase = "reporting the results"
            recorder.before_timing()  # a run that never timed a step still passes, once
            gate.hold(spec.gate)  # from here nothing is timed per step: the next run may start
            emit(event="trained")
            if spec.save_weights:
                phase = "saving the weights"
                save_weights(spec.save_weights, model)
            phase = "measuring communication"
            backend.measure(model)
            memory, memory_source = backend.peak_memory()
            done = Finished(
                device_names,
                backend.describe(),
                steps,
                startup,
                memory,
                memory_source,
                base_lr,
                learning_rate,
            )
            result = finished_result(
                spec,
                base,
                done,
                recorder,
                tuned,
                model,
                lambda step_time: backend.result_fields(model, step_time),
            )
            if spec.gate is not None:
                result.extra["waited_at_gate_s"] = recorder.waited_s
            result.extra.update(rounds.row_fields())
            if spec.prepares_together and not rounds.later:
                result.extra["prepared_beside_other_runs"] = True
            return result

        def round_after() -> StepRecorder:
            """At the end of a round this process trains another after: report it, wait for
            the caller's word, put back the first round's state; the next round's recorder."""
            nonlocal recorder, startup
            row = finish()
            emit(event="result", result=row.to_dict())
            measured = measured_in([row])
            if measured is not None:  # the later rounds report what this one measured
                backend.lend_communication(measured)
            gate.release()  # nothing of this process runs until its next turn
            if next_round is None or not next_round():
                os._exit(0)  # the caller has gone or stopped the comparison: nothing to report
            began = time.perf_counter()
            rounds.begin_next()
            recorder = new_recorder()
            startup = time.perf_counter() - began
            # Said as such on its progress line: this round set up nothing, the first round did.
            enter("training", total=total, startup_s=startup, **rounds.row_fields())
            recorder.train_begin()  # passes the gate: fit began once, for every round
            return recorder

        recorder = new_recorder()
        startup = time.perf_counter() - start
        # A run started ahead, or prepared beside the others, shows where its start-up went.
        enter("training", total=total, startup_s=startup, together=spec.prepares_together)
        backend.train(model, recorder)
        return finish()
    except BaseException as error:  # noqa: BLE001 - every failure becomes this run's row
        status, reason = classify_exception(error, phase)
        if not isinstance(error, EXPECTED):
            traceback.print_exc()  # unexpected: the worker's stderr keeps the whole story
        kept = getattr(error.__cause__ or error, "extra", None)  # a refused budget's state
        kept = dict(kept) if isinstance(kept, dict) else {}
        if rounds is not None:  # a later round's failure is that round's row
            kept.update(rounds.row_fields())
        return RunResult(**base, status=status, reason=reason, extra=kept)


def base_fields(spec: RunSpec, versions: dict[str, str]) -> dict[str, Any]:
    """What every row of this run carries, finished or not."""
    return dict(
        **spec.result_identity(),
        versions={"python": platform.python_version(), **versions, "gpu_parallel_kit": __version__},
        created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )


def save_weights(path: str, model: Any) -> None:
    np.savez(path, *[np.asarray(w) for w in model.get_weights()])
