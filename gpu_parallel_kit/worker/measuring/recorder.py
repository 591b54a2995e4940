"""Per-step measurements inside a worker, and the Keras callback that feeds them from `fit`.

`model.fit`'s own wall clock is a poor timer (its first batch traces, its return can stall while the
input iterator is torn down), so steps are timed by their end timestamps, warm-up steps left out.
Progress goes to the parent at most a few times a second so reporting never slows training.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import keras

from .stats import default_warmup_steps, median_and_spread, step_durations

PROGRESS_INTERVAL_S = 0.25
# How long the timer waits for Keras's thread to stamp steps' ends (before a turn, or to bound how
# far the loop runs ahead): they are ready in milliseconds; a step that failed never is, and its
# error then ends the run at the next step.
STAMPS_WAIT_S = 30.0


class StepRecorder:
    """Collects step and epoch timestamps, the loss history and the evaluations of one run.

    Time spent evaluating (and reading the learning rate) is paused out of the clock, so it never
    counts in a step, an epoch or the wall time, and evaluation timestamps are training seconds.
    """

    def __init__(
        self,
        total_steps: int,
        emit: Callable[..., None],
        warmup_steps: int | None = None,
        steps_per_epoch: int | None = None,
        steps_per_execution: int = 1,
    ) -> None:
        self.total_steps = total_steps
        # Keras calls back once per execution: its steps share the execution's time equally.
        self.steps_per_execution = max(steps_per_execution, 1)
        self.steps_per_epoch = steps_per_epoch or total_steps or 1
        self.warmup_steps = (
            default_warmup_steps(total_steps)
            if warmup_steps is None
            else min(warmup_steps, max(total_steps - 1, 0))
        )
        self._emit = emit
        # Installed by the worker: waits at the training gate, returns the seconds waited.
        self.gate: Callable[[], float] | None = None
        self.waited_s = 0.0
        self._first_begin: float | None = None
        self._batch_ends: list[float] = []
        self._aside: set[int] = set()  # steps timed task by task (`step_end(aside=True)`)
        self._left_out = 0  # of them, left out of the statistics by `summary`
        self._epoch_begin = 0.0
        self._paused_s = 0.0  # spent on evaluations: left out of every timing
        self.epoch_times: list[float] = []
        self.history: dict[str, list[float]] = {}
        self.history_time_s: list[float] = []
        self.evaluations: list[dict[str, float]] = []
        self._last_progress = 0.0
        # Called by StepTimer.on_train_end: the worker reports from there, not after fit returns.
        self.on_train_end: Callable[[], None] | None = None
        # Installed by the worker when the run has validation data: returns {"val_loss": ...}.
        self.evaluate: Callable[[], dict[str, float]] | None = None
        self.evaluate_every_steps: int | None = None  # None: at each epoch end
        # Installed by the worker: the optimizer's current learning rate.
        self.learning_rate: Callable[[], float] | None = None
        # Installed by the worker when its process trains another round after this recorder's
        # (runs/scheduling/resident_rounds.py): reports this round, waits for the next, returns its
        # recorder.
        self.next_round: Callable[[], StepRecorder] | None = None
        # Installed by the worker when the run prepared beside others
        # (runs/scheduling/resident_rounds.py): waits for its turn and the gate once its warm-up
        # steps are done; the seconds waited.
        self.after_warmup: Callable[[], float] | None = None
        self._waiting_s = 0.0  # spent waiting for the turn: left out of every timing

    def _clock(self) -> float:
        return time.perf_counter() - self._paused_s - self._waiting_s

    def before_timing(self) -> None:
        """Wait, once, until nothing else of the caller runs beside this run's timed work (the
        training gate, runs/scheduling/training_gate.py): called at the first step, or earlier by an
        engine that times something before it (a pipeline's micro-batch curve). The wait is never
        timed."""
        gate, self.gate = self.gate, None
        if gate is not None:
            self.waited_s = gate()

    def train_begin(self) -> None:
        self.before_timing()
        if self.warmup_steps == 0:  # no warm-up to prepare: its turn comes before any step
            self.wait_for_turn()
        self._first_begin = self._clock()

    def wait_for_turn(self) -> None:
        """A run prepared beside others (`after_warmup`): wait, once, for its turn; the wait is
        left out of every timing."""
        hook, self.after_warmup = self.after_warmup, None
        if hook is not None:
            started = time.perf_counter()
            self.waited_s = hook()
            self._waiting_s += time.perf_counter() - started

    def epoch_begin(self) -> None:
        self._epoch_begin = self._clock()

    def step_end(self, steps: int = 1, aside: bool = False) -> None:
        """Record the end of `steps` optimizer steps (more than one with steps_per_execution).
        `aside`: a step its loop timed task by task (a pipeline's timeline), whose waits are
        the measurement's, not training's: left out of the step statistics where other
        steps remain."""
        now = self._clock()
        previous = self._batch_ends[-1] if self._batch_ends else self._first_begin or now
        if aside:
            self._aside.update(range(len(self._batch_ends), len(self._batch_ends) + steps))
        for i in range(1, steps + 1):
            self._batch_ends.append(previous + (now - previous) * i / steps)
        if now - self._last_progress >= PROGRESS_INTERVAL_S or self.done:
            self._last_progress = now
            self._emit(
                event="progress",
                step=len(self._batch_ends),
                total=self.total_steps,
                step_time_s=(now - previous) / steps,
            )
        every = self.evaluate_every_steps
        if self.evaluate is not None and every:
            done = len(self._batch_ends)
            if done // every > (done - steps) // every or (self.done and done % every):
                self._paused(self._evaluation)

    def epoch_end(self, logs: dict[str, Any] | None) -> None:
        now = self._clock()
        self.epoch_times.append(now - self._epoch_begin)
        self.history_time_s.append(now - (now if self._first_begin is None else self._first_begin))
        for key, value in (logs or {}).items():
            try:
                self.history.setdefault(key, []).append(float(value))
            except (TypeError, ValueError):
                continue
        self._paused(self._epoch_bookkeeping)

    def _epoch_bookkeeping(self) -> None:
        if self.learning_rate is not None:
            self.history.setdefault("learning_rate", []).append(self.learning_rate())
        if self.evaluate is not None and not self.evaluate_every_steps:
            for key, value in self._evaluation().items():
                self.history.setdefault(key, []).append(value)

    def _evaluation(self) -> dict[str, float]:
        """Evaluate now and record the values with the training time and epoch they belong to."""
        done = len(self._batch_ends)
        training = self._clock()
        begin = training if self._first_begin is None else self._first_begin
        record: dict[str, float] = {
            "epoch": done / self.steps_per_epoch,
            "step": done,
            "time_s": training - begin,  # training only: earlier evaluations left out
            "wall_time_s": training + self._paused_s - begin,  # as the wall clock saw it
        }
        values = self.evaluate() if self.evaluate is not None else {}
        record.update(values)
        if self.learning_rate is not None:
            record["learning_rate"] = self.learning_rate()
        self.evaluations.append(record)
        return values

    def _paused(self, work: Callable[[], Any]) -> None:
        start = time.perf_counter()
        try:
            work()
        finally:
            self._paused_s += time.perf_counter() - start

    def method(self) -> str:
        """How the step times were taken, in words, for the row's `extra["step_time_method"]`."""
        left_out = self._left_out
        aside = f"; the {left_out} steps timed task by task are left out" if left_out else ""
        if self.steps_per_execution == 1:
            return f"per step: time between consecutive step ends (Keras's batch callbacks){aside}"
        n = self.steps_per_execution
        return (
            f"per execution of {n} steps: Keras calls back once per execution (a one-stage "
            "pipeline's loop stamps once per call alike), so each step's "
            f"time is its execution's time / {n}; the spread is between executions, and "
            f"warm-up is rounded up to whole executions{aside}"
        )

    @property
    def done(self) -> bool:
        return len(self._batch_ends) >= self.total_steps

    @property
    def steps_done(self) -> int:
        return len(self._batch_ends)

    def summary(self) -> dict[str, Any]:
        """Step statistics, as RunResult fields."""
        durations = step_durations(self._batch_ends, self._first_begin or 0.0)
        measured = durations[self.warmup_steps :]
        training = [
            d for i, d in enumerate(durations) if i >= self.warmup_steps and i not in self._aside
        ]
        self._left_out = len(measured) - len(training) if training else 0
        measured = training or measured
        median, spread = median_and_spread(measured)
        wall = (self._batch_ends[-1] - self._first_begin) if self._batch_ends else None
        # The first execution traces and compiles: its time beyond typical steps is a one-off.
        first = durations[: self.steps_per_execution]
        compile_time = max(0.0, sum(first) - len(first) * median) if first and median else None
        return {
            "step_times_s": tuple(measured),
            "warmup_steps": self.warmup_steps,
            "step_time_s": median,
            "step_time_spread_s": spread,
            "wall_time_s": wall,
            "epoch_times_s": tuple(self.epoch_times),
            "history": self.history,
            "history_time_s": tuple(self.history_time_s),
            "evaluations": tuple(self.evaluations),
            "evaluation_time_s": self._paused_s if self.evaluate is not None else None,
            "compile_time_s": compile_time,
        }


class StepTimer(keras.callbacks.Callback):
    """Feeds a StepRecorder from `model.fit`, without making Keras wait for every step.

    Async-safe, so on a backend that dispatches callbacks to a thread (JAX) the loop runs ahead
    while the callback stamps each step once its logs are ready, that is once it has finished on
    the device; TensorFlow calls it in line, as a user's own `fit` waits anyway. A run prepared
    beside others waits for its turn at the first timed step's beginning, outside the clock.

    Args:
        recorder: the `StepRecorder` fed.
        executions_ahead: at most this many executions dispatched beyond the last one stamped
            (None: no bound).
    """

    def __init__(self, recorder: StepRecorder, executions_ahead: int | None = None) -> None:
        super().__init__()
        self.recorder = recorder
        # On host devices XLA's in-process collectives deadlock and abort the process once
        # hundreds of executions are queued (Keras 3.15, JAX, 2 CPU cores: a DataParallel fit of
        # 300 steps in one epoch); a few ahead keep the devices as busy.
        self.executions_ahead = executions_ahead
        self._epoch_first_step = 0
        self._lock = threading.Lock()
        self._stamped = threading.Condition(self._lock)  # a step's end stamped

    @property
    def async_safe(self) -> bool:
        """Read by Keras's CallbackList when fit starts (keras/src/callbacks/callback_list.py)."""
        # Evaluations inside an epoch must see the weights of the step that triggered them, and
        # pause the training clock: then the callback runs in line.
        return not self.recorder.evaluate_every_steps

    def on_train_batch_begin(self, batch, logs=None) -> None:
        recorder = self.recorder
        step = self._epoch_first_step + batch
        if self.executions_ahead is not None:
            self._wait_for_stamps(step - self.executions_ahead * recorder.steps_per_execution)
        if recorder.after_warmup is None or step < recorder.warmup_steps:
            return
        self._wait_for_stamps(recorder.warmup_steps)
        # Every backend calls a batch's beginning in line: the loop stops here, once Keras's
        # thread has stamped the warm-up steps' ends, until this run's turn comes.
        recorder.wait_for_turn()

    def _wait_for_stamps(self, steps: int) -> None:
        """Until Keras's thread has stamped `steps` steps' ends; bounded, since a step that
        failed in that thread never stamps (its error then ends the run at the next step)."""
        with self._stamped:
            self._stamped.wait_for(lambda: self.recorder.steps_done >= steps, STAMPS_WAIT_S)

    def on_train_begin(self, logs=None) -> None:
        self.recorder.train_begin()

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._epoch_first_step = self.recorder.steps_done
        self.recorder.epoch_begin()

    def on_train_batch_end(self, batch, logs=None) -> None:
        # With steps_per_execution > 1 Keras reports once per execution, passing its last step.
        # Calls may come from several threads in any order: the lock keeps the lists whole, and
        # a call already covered by a later one counts nothing (that one spread its steps).
        with self._lock:
            done_this_epoch = self.recorder.steps_done - self._epoch_first_step
            steps = batch + 1 - done_this_epoch
            if steps >= 1:
                self.recorder.step_end(steps)
            self._stamped.notify_all()

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.recorder.epoch_end(logs)
        # A round's last epoch, with another round in this process's fit: that round's recorder.
        if self.recorder.done and self.recorder.next_round is not None:
            self.recorder = self.recorder.next_round()

    def on_train_end(self, logs=None) -> None:
        if self.recorder.on_train_end is not None:
            self.recorder.on_train_end()
