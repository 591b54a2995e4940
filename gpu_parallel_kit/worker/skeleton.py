"""One run, whatever its backend: the phases, the finished row, and a failure turned into a row.

A backend plugs in as a `BackendRun` (`worker/tensorflow/run.py`, `worker/jax/run.py`), which
delegates to the worker class its strategy's record names, a `WorkerStrategy` whose hooks are
the same on both backends (`worker/strategy_hooks.py`). The skeleton never asks which
strategy or backend it runs: it sets up the devices, prepares the data, builds the model under
the strategy, trains, measures and describes, naming each phase so a failure or a timeout says
where the run was. Each worker class will `prepare_measurement` before the first timed step what
it will `measure` after training. No TensorFlow or JAX is imported here.
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
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from ..errors import GpkError
from ..runs.description.communication_reuse import MeasuredComm, measured_in
from ..runs.description.run_spec import RunSpec
from ..runs.processes.failure_reasons import classify_exception
from ..runs.results.run_result import RunResult
from ..runs.scheduling import training_gate
from ..version import __version__
from .budget import MemoryBudgetExceeded
from .child import Finished, finished_result, tuned_recorder
from .lr_schedule import apply_run_rule
from .measuring.peak_memory import PeakMemory
from .measuring.round_loop import Rounds
from .measuring.stats import warmup_steps

if TYPE_CHECKING:
    import keras

    from ..runs.description.tuning_rules import Tuned
    from .measuring.recorder import StepRecorder

# Failures that already are the user's sentence: the worker's stderr needs no traceback of them.
EXPECTED = (GpkError, MemoryBudgetExceeded)


class BuiltModel(NamedTuple):
    """A run's model, compiled and built under its strategy, and what tune chose for it."""

    model: keras.Model  # the user's model, its variables placed by the strategy
    tuned: Tuned  # the settings it was compiled with


class BackendRun(Protocol):
    """What one backend does for one run; the skeleton calls these in order."""

    def versions(self) -> dict[str, str]:
        """Versions of the backend's own libraries (tensorflow or jax, keras), for the row."""

    def set_up_devices(self) -> tuple[str, ...]:
        """Start the backend on the run's devices (and its determinism); their names."""

    def prepare_data(self) -> int:
        """The run's batches, in the kit's seeded order; the steps per epoch."""

    def build(self, steps_per_epoch: int, total: int, warmup: int) -> BuiltModel:
        """The user's model, seeded, compiled with tune's settings and built under the strategy;
        and those settings."""

    def scope(self) -> contextlib.AbstractContextManager:
        """Where the model's optimizer and variables live: the strategy's scope."""

    def watch(self, recorder: StepRecorder, model: keras.Model) -> None:
        """Anything that follows training step by step (validation), before it starts."""

    def train(self, model: keras.Model, recorder: StepRecorder) -> None:
        """Check the memory budget, then train every step of every epoch, feeding `recorder`."""

    def prepare_measurement(self, model: keras.Model) -> None:
        """Before the first timed step: trace or compile what `measure` times after training,
        so the comparison's next run waits only for the timing (a failure is kept for then)."""

    def time_tasks_alone(self, model: keras.Model) -> None:
        """After training: a pipeline's tasks timed one at a time (its simulated view), weights
        unchanged; nothing for a strategy without tasks. Every round, whatever `measure_comm`
        says: it is the pipeline's view, not a communication measurement."""

    def measure(self, model: keras.Model) -> None:
        """After training: what the strategy measures apart (communication), weights unchanged."""

    def peak_memory(self) -> PeakMemory:
        """Peak bytes per device and what that figure is."""

    def describe(self) -> str:
        """The communication the strategy uses, in a few words ("" for none)."""

    def result_fields(self, model: keras.Model, step_time_s: float | None) -> dict[str, Any]:
        """RunResult fields only this strategy measures, `extra` among them."""

    def lend_communication(self, measured: MeasuredComm) -> None:
        """Later rounds in this process report what its first round measured, as a later
        round in a process of its own would (`runs/description/communication_reuse.py`)."""


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

    A spec of several rounds in this process (`runs/scheduling/resident_rounds.py`) reports each
    round but the last at its end, waits there for `next_round`'s word, and trains the next from the
    state the first started from (`worker/measuring/round_loop.py`).
    """
    if spec.more_rounds_here and next_round is None:
        raise ValueError("a run of several rounds in one process needs the caller's next_round")
    return RunPhases(spec, emit, report_and_exit, backend, next_round).run()


class RunPhases:
    """One run in this process, phase by phase: set up, build, train, then (at the end of
    training) save, measure and report; the backend does each phase's work.

    `phase` names where the run is, so that a failure or a timeout says it. Before the first
    timed step the recorder calls `prepare_measurement` (and `take_turn` for a run prepared
    beside the others); at each round's end but the last, `next_round_recorder`.
    """

    def __init__(
        self,
        spec: RunSpec,
        emit: Callable[..., None],
        report_and_exit: Callable[[RunResult], None] | None,
        backend: BackendRun,
        next_round: Callable[[], bool] | None,
    ) -> None:
        self.spec = spec
        self.emit = emit
        self.report_and_exit = report_and_exit
        self.backend = backend
        self.next_round = next_round
        self.started = time.perf_counter()
        self.phase = "setting up devices"
        self.base = base_fields(spec, backend.versions())
        self.rounds: Rounds | None = None

    def run(self) -> RunResult:
        """Every phase in turn; the finished row, or the failure's."""
        try:
            self.set_up()
            self.build()
            self.train()
            return self.finish()
        except BaseException as error:  # noqa: BLE001 - every failure becomes this run's row
            return self.failed(error)

    def enter(self, name: str, **details: Any) -> None:
        """Say that the run is now in phase `name` (the caller's progress line shows it)."""
        self.phase = name
        self.emit(event="phase", phase=name, **details)

    def set_up(self) -> None:
        """The run's devices, then its data; the steps it trains and warms up."""
        spec = self.spec
        if spec.prepares_together:  # beside the comparison's other first rounds: nobody times
            training_gate.share(spec.gate, spec.timeout_s)
            self.emit(event="sharing")
        self.enter("setting up devices")
        warnings.filterwarnings("ignore", module="keras")
        self.device_names = self.backend.set_up_devices()
        self.enter("preparing the data")
        self.steps = self.backend.prepare_data()
        self.total = self.steps * spec.training.epochs
        self.warmup = warmup_steps(spec.training.warmup_steps, self.total)

    def build(self) -> None:
        """The model under the strategy, its learning-rate rule, and the state later rounds
        start from."""
        self.enter("building the model")
        self.model, self.tuned = self.backend.build(self.steps, self.total, self.warmup)
        with self.backend.scope():
            self.base_lr, self.learning_rate = apply_run_rule(
                self.model.optimizer, self.spec, self.steps
            )
        self.rounds = Rounds(self.spec, self.model)

    def train(self) -> None:
        """Every step of every epoch (of every round this process trains), timed."""
        self.recorder = self.new_recorder()
        self.startup = time.perf_counter() - self.started
        # A run started ahead, or prepared beside the others, shows where its start-up went.
        self.enter(
            "training",
            total=self.total,
            startup_s=self.startup,
            together=self.spec.prepares_together,
        )
        self.backend.train(self.model, self.recorder)

    def prepare_measurement(self) -> float:
        """At the first timed step: keep the first round's state, prepare what is measured
        after training, beside the set-up rather than after it, then pass the gate; the
        seconds waited there."""
        self.rounds.keep_first_state()
        self.backend.prepare_measurement(self.model)
        if self.spec.prepares_together:  # its warm-up is part of the preparing
            return 0.0
        return training_gate.pass_through(self.spec.gate)

    def take_turn(self) -> float:
        """A run prepared beside the others: its share given back, its turn, the gate."""
        training_gate.unshare()
        if self.next_round is None or not self.next_round():
            os._exit(0)  # the caller has gone or stopped the comparison: nothing to report
        waited = training_gate.pass_through(self.spec.gate)
        self.emit(event="turn")  # its timeout counts from here (runner._Watch)
        return waited

    def new_recorder(self) -> StepRecorder:
        """A round's recorder, with the phases it calls at its first timed step and its end."""
        made = tuned_recorder(self.emit, self.tuned, self.warmup, self.total, self.steps)
        self.backend.watch(made, self.model)
        # The last run of the caller may still be measuring beside this one: the recorder
        # waits for it before the first timed step (runs/scheduling/training_gate.py), so this run's
        # set-up overlaps it. A first round of several keeps the state it starts from.
        made.gate = self.prepare_measurement
        if self.report_and_exit is not None:
            report_and_exit = self.report_and_exit
            made.on_train_end = lambda: report_and_exit(self.finish())
        if self.rounds.more:
            made.next_round = self.next_round_recorder
        if self.spec.prepares_together and not self.rounds.later:
            made.after_warmup = self.take_turn
        return made

    def finish(self) -> RunResult:
        """Training over: the gate handed on, the weights saved, the measurement, the row."""
        self.phase = "reporting the results"
        self.recorder.before_timing()  # a run that never timed a step still passes, once
        # From here nothing is timed per step: the next run may start.
        training_gate.hold(self.spec.gate)
        self.emit(event="trained")
        self.save()
        self.measure()
        return self.result()

    def save(self) -> None:
        """The trained weights, where the spec asks for them."""
        if self.spec.save_weights:
            self.phase = "saving the weights"
            save_weights(self.spec.save_weights, self.model)

    def measure(self) -> None:
        """What the strategy measures apart from training, the weights unchanged: a pipeline's
        tasks alone, then communication. A failure of either keeps the trained row (without
        that view), and the worker's stderr keeps why."""
        self.phase = "timing each task alone"
        try:
            self.backend.time_tasks_alone(self.model)
        except Exception:  # noqa: BLE001 - a measurement must not cost the run its results
            traceback.print_exc()
        self.phase = "measuring communication"
        self.backend.measure(self.model)

    def result(self) -> RunResult:
        """The finished row: timings, memory, the strategy's own fields, the rounds'."""
        spec, backend, model, rounds = self.spec, self.backend, self.model, self.rounds
        peak = backend.peak_memory()
        done = Finished(
            self.device_names,
            backend.describe(),
            self.steps,
            self.startup,
            peak.by_device,
            peak.how,
            self.base_lr,
            self.learning_rate,
        )
        result = finished_result(
            spec,
            self.base,
            done,
            self.recorder,
            self.tuned,
            model,
            lambda step_time: backend.result_fields(model, step_time),
        )
        if spec.gate is not None:
            result.extra["waited_at_gate_s"] = self.recorder.waited_s
        result.extra.update(rounds.row_fields())
        if spec.prepares_together and not rounds.later:
            result.extra["prepared_beside_other_runs"] = True
        return result

    def next_round_recorder(self) -> StepRecorder:
        """At the end of a round this process trains another after: report it, wait for the
        caller's word, put back the first round's state; the next round's recorder."""
        row = self.finish()
        self.emit(event="result", result=row.to_dict())
        measured = measured_in([row])
        if measured is not None:  # the later rounds report what this one measured
            self.backend.lend_communication(measured)
        training_gate.release()  # nothing of this process runs until its next turn
        if self.next_round is None or not self.next_round():
            os._exit(0)  # the caller has gone or stopped the comparison: nothing to report
        began = time.perf_counter()
        self.rounds.begin_next()
        self.recorder = self.new_recorder()
        self.startup = time.perf_counter() - began
        # Said as such on its progress line: this round set up nothing, the first round did.
        self.enter("training", total=self.total, startup_s=self.startup, **self.rounds.row_fields())
        self.recorder.train_begin()  # passes the gate: fit began once, for every round
        return self.recorder

    def failed(self, error: BaseException) -> RunResult:
        """The row of a run that failed in its current phase."""
        ended = classify_exception(error, self.phase)
        if not isinstance(error, EXPECTED):
            traceback.print_exc()  # unexpected: the worker's stderr keeps the whole story
        kept = getattr(error.__cause__ or error, "extra", None)  # a refused budget's state
        kept = dict(kept) if isinstance(kept, dict) else {}
        if self.rounds is not None:  # a later round's failure is that round's row
            kept.update(self.rounds.row_fields())
        return RunResult(**self.base, status=ended.status, reason=ended.reason, extra=kept)


def base_fields(spec: RunSpec, versions: dict[str, str]) -> dict[str, Any]:
    """What every row of this run carries, finished or not."""
    return dict(
        **spec.result_identity(),
        versions={"python": platform.python_version(), **versions, "gpu_parallel_kit": __version__},
        created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )


def save_weights(path: str, model: keras.Model) -> None:
    np.savez(path, *[np.asarray(w) for w in model.get_weights()])
