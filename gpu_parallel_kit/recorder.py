"""Per-step measurements inside a worker, and the Keras callback that feeds them from `fit`.

`model.fit`'s own wall clock is a poor timer (its first batch traces, its return can stall while the
input iterator is torn down), so steps are timed by their end timestamps, warm-up steps left out.
Progress goes to the parent at most a few times a second so reporting never slows training.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import keras

from .stats import default_warmup_steps, median_and_spread, step_durations

PROGRESS_INTERVAL_S = 0.25


class StepRecorder:
    """Collects step and epoch timestamps and the loss history of one run."""

    def __init__(
        self, total_steps: int, emit: Callable[..., None], warmup_steps: int | None = None
    ) -> None:
        self.total_steps = total_steps
        self.warmup_steps = (
            default_warmup_steps(total_steps)
            if warmup_steps is None
            else min(warmup_steps, max(total_steps - 1, 0))
        )
        self._emit = emit
        self._first_begin: float | None = None
        self._batch_ends: list[float] = []
        self._epoch_begin = 0.0
        self.epoch_times: list[float] = []
        self.history: dict[str, list[float]] = {}
        self._last_progress = 0.0
        # Called by StepTimer.on_train_end: the worker reports from there, not after fit returns.
        self.on_train_end: Callable[[], None] | None = None

    def train_begin(self) -> None:
        self._first_begin = time.perf_counter()

    def epoch_begin(self) -> None:
        self._epoch_begin = time.perf_counter()

    def step_end(self, steps: int = 1) -> None:
        """Record the end of `steps` optimizer steps (more than one with steps_per_execution)."""
        now = time.perf_counter()
        previous = self._batch_ends[-1] if self._batch_ends else self._first_begin or now
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

    def epoch_end(self, logs: dict[str, Any] | None) -> None:
        self.epoch_times.append(time.perf_counter() - self._epoch_begin)
        for key, value in (logs or {}).items():
            try:
                self.history.setdefault(key, []).append(float(value))
            except (TypeError, ValueError):
                continue

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
        median, spread = median_and_spread(measured)
        wall = (self._batch_ends[-1] - self._first_begin) if self._batch_ends else None
        return {
            "step_times_s": tuple(measured),
            "warmup_steps": self.warmup_steps,
            "step_time_s": median,
            "step_time_spread_s": spread,
            "wall_time_s": wall,
            "epoch_times_s": tuple(self.epoch_times),
            "history": self.history,
        }


class StepTimer(keras.callbacks.Callback):
    """Feeds a StepRecorder from `model.fit`.

    Not marked async-safe on purpose: Keras then hands over the step's logs synchronously, so the
    timestamp is taken after the step has really finished on the device.
    """

    def __init__(self, recorder: StepRecorder) -> None:
        super().__init__()
        self.recorder = recorder
        self._epoch_first_step = 0

    def on_train_begin(self, logs=None) -> None:
        self.recorder.train_begin()

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._epoch_first_step = self.recorder.steps_done
        self.recorder.epoch_begin()

    def on_train_batch_end(self, batch, logs=None) -> None:
        # With steps_per_execution > 1 Keras reports once per execution, passing its last step.
        done_this_epoch = self.recorder.steps_done - self._epoch_first_step
        self.recorder.step_end(max(1, batch + 1 - done_this_epoch))

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.recorder.epoch_end(logs)

    def on_train_end(self, logs=None) -> None:
        if self.recorder.on_train_end is not None:
            self.recorder.on_train_end()
