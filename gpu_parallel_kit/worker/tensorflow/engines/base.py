"""What every engine shares: a tf.distribute strategy, and two ways to train under it.

`fit` is Keras's own loop, the idiomatic fast path. `explicit` is the data-parallel recipe written
out (custom_loop.py), shared with multi-worker training. Both give the same weights as
single-device training on the same global batch.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any

import keras
import tensorflow as tf

from ....runs.description.run_spec import RunSpec
from ...budget import state_bytes
from ...measuring.recorder import StepRecorder, StepTimer
from ...strategy_hooks import ModelAndBatches, WorkerStrategy
from ..datasets import ReplicaShares
from ..keras_internals import dispatches_async, spare_fits_symbolic_build
from .budget import check_budget, replica_memory_of
from .custom_loop import train_custom_loop


class Engine(WorkerStrategy):
    """Trains a built model on one run's devices under a tf.distribute strategy, and feeds a
    StepRecorder; the hooks are `WorkerStrategy`'s."""

    name: str = ""
    # Each replica's own pipeline of its share of every batch, where the data allows it (the
    # run sets it; `datasets.replica_shares`).
    replica_shares: ReplicaShares | None = None

    def __init__(self, spec: RunSpec, device_names: tuple[str, ...]) -> None:
        self.spec = spec
        self.device_names = device_names
        self.distribution = self.make_distribution()

    @abc.abstractmethod
    def make_distribution(self) -> tf.distribute.Strategy:
        """The tf.distribute strategy models are built and trained under."""

    def scope(self) -> contextlib.AbstractContextManager:
        """Where the user's model is built and compiled: inside the strategy, for replicas."""
        return self.distribution.scope()

    def predict(self, model: keras.Model, x: Any) -> tuple[Any, Any]:
        """Predictions for validation and the model's regularization loss, without training.

        Outside the strategy's replicas: every replica holds the same weights, so the first
        answers (worker/tensorflow/engines/evaluation.py).
        """
        if getattr(self, "_predict_fn", None) is None:

            @tf.function(reduce_retracing=True)
            def predict_fn(inputs):
                predictions = model(inputs, training=False)
                extra = [tf.cast(loss, tf.float32) for loss in model.losses]
                return predictions, tf.add_n(extra) if extra else tf.constant(0.0)

            self._predict_fn = predict_fn
        return self._predict_fn(x)

    def fit_input(self, dataset: tf.data.Dataset) -> Any:
        """What `fit` iterates: the run's pipeline of global batches, which Keras distributes
        under the engine's strategy."""
        return dataset

    def live_optimizer(self, model: keras.Model) -> keras.optimizers.Optimizer:
        """The optimizer whose learning rate is in force: the model's, unless stages own one."""
        return model.optimizer

    def result_fields(self, run: ModelAndBatches, step_time_s: float | None) -> dict[str, Any]:
        """The replicas' state and parameter bytes, their memory, and whether the timer ran
        behind the loop."""
        extra = {"state_bytes": self.state_bytes, "parameter_bytes": self.parameter_bytes}
        if getattr(self, "memory", None):
            extra["memory"] = self.memory
        if getattr(self, "callbacks_async", None) is not None:
            extra["timer_async"] = self.callbacks_async
        return {"extra": extra}

    def prepare_replicas(self, model: keras.Model, dataset: tf.data.Dataset) -> None:
        """Build the optimizer's slots beside their variables and hold what each replica needs
        (parameters, gradients, optimizer state, activations) against the memory budget,
        before the first step."""
        with self.distribution.scope():
            model.optimizer.build(model.trainable_variables)
        # Activations cost a call of the model to model: only where a budget counts them.
        budgeted = self.spec.memory_budget is not None
        share = self.spec.global_batch // self.distribution.num_replicas_in_sync
        self.memory = replica_memory_of(model, self.device_names, dataset, share if budgeted else 0)
        # Every replica holds the whole model and its optimizer state, counted once above.
        self.state_bytes = state_bytes(self.memory)
        # What an all-reduce moves per step: one gradient per trainable parameter.
        self.parameter_bytes = int(next(iter(self.memory["devices"].values()))["grads_bytes"])
        kept = {"parameter_bytes": self.parameter_bytes}  # a refused row keeps its parts
        check_budget(self.memory, self.spec.memory_budget, extra=kept)

    def train(self, run: ModelAndBatches, steps_per_epoch: int, recorder: StepRecorder) -> None:
        model, dataset = run
        self.prepare_replicas(model, dataset)
        if self.spec.mode == "explicit":
            batches = iter(self.distribution.experimental_distribute_dataset(dataset))
            train_custom_loop(
                self.distribution,
                model,
                batches,
                self.spec.training.epochs,
                steps_per_epoch,
                recorder,
            )
        else:
            with self.distribution.scope():  # the engine's strategy; the default for single
                spare_fits_symbolic_build(model, dataset.element_spec)
            timer = StepTimer(recorder)
            # Recorded for the row: whether Keras lets the loop run ahead of the timer.
            self.callbacks_async = dispatches_async([timer])
            model.fit(
                self.fit_input(dataset),
                # Every round this process trains, in one fit (runs/scheduling/resident_rounds.py).
                epochs=self.spec.training.epochs * self.spec.rounds_here,
                steps_per_epoch=steps_per_epoch,
                callbacks=[timer],
                verbose=0,
                shuffle=False,
            )
