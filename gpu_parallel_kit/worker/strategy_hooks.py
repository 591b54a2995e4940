"""The hooks every strategy's worker class implements, on either backend, with one signature.

TensorFlow's `Engine` (`worker/tensorflow/engines/base.py`) and JAX's `JaxStrategy`
(`worker/jax/strategies.py`) subclass `WorkerStrategy`; each backend's run
(`worker/skeleton.BackendRun`) calls these hooks in the skeleton's order, handing each the
model and the run's batches as one `ModelAndBatches`. A hook a strategy has no use for is the
base's no-op. No TensorFlow or JAX is imported here.

>>> run = ModelAndBatches(model, batches)
>>> strategy.before_training(run)
>>> strategy.train(run, steps_per_epoch, recorder)  # prepare_measurement at its first timed step
>>> strategy.time_tasks_alone(run); strategy.measure(run); strategy.after_training(run)
>>> strategy.result_fields(run, step_time_s)
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import contextlib

    import keras

    from .measuring.recorder import StepRecorder


class ModelAndBatches(NamedTuple):
    """What a strategy's hook works on: the run's model and its batches."""

    model: keras.Model
    # The batches in the kit's order: a `tf.data.Dataset` of global batches on TensorFlow, the
    # `feed.OrderedBatches` fit reads on JAX (this process's rows of each, in a run of several).
    batches: Any


class WorkerStrategy(abc.ABC):
    """What one strategy does inside a run's worker, whatever the backend.

    A subclass gives the scope its model is built under and its training loop, and overrides
    the hooks it has a use for.
    """

    @abc.abstractmethod
    def scope(self) -> contextlib.AbstractContextManager:
        """Where the model is built and compiled, and its optimizer and variables live."""

    @abc.abstractmethod
    def train(self, run: ModelAndBatches, steps_per_epoch: int, recorder: StepRecorder) -> None:
        """Every step of every epoch (of every round this process trains), feeding `recorder`."""

    def describe(self) -> str:
        """The communication the strategy uses, in a few words ("" for none)."""
        return ""

    def before_training(self, run: ModelAndBatches) -> None:
        """What the strategy holds or checks before the first step; nothing here."""
        return None

    def prepare_measurement(self, run: ModelAndBatches) -> None:
        """Before the first timed step, where it costs the comparison nothing: what the
        measurements after training can prepare (a traced or compiled measurement, the layers
        the row's memory models); nothing here."""
        return None

    def time_tasks_alone(self, run: ModelAndBatches) -> None:
        """After training: a pipeline's tasks timed one at a time, weights unchanged; nothing
        here."""
        return None

    def measure(self, run: ModelAndBatches) -> None:
        """After training: what the strategy measures apart (communication), weights unchanged;
        nothing here."""
        return None

    def after_training(self, run: ModelAndBatches) -> None:
        """What the strategy reads off the trained model before its row is written; nothing
        here."""
        return None

    def result_fields(self, run: ModelAndBatches, step_time_s: float | None) -> dict[str, Any]:
        """RunResult fields only this strategy measures, `extra` among them."""
        return {"extra": {}}
