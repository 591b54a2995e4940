"""What every engine shares: a tf.distribute strategy, and two ways to train under it.

`fit` is Keras's own loop, the idiomatic fast path. `explicit` is the data-parallel recipe written
out: each replica computes gradients on its share of the global batch (`strategy.run`), the
gradients are summed across replicas by an explicit all-reduce, and one update is applied to every
copy of the variables. Both give the same weights as single-device training on the same global
batch.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any

import keras
import tensorflow as tf

from ..recorder import StepRecorder, StepTimer
from ..spec import RunSpec
from .budget import check_budget, variable_bytes
from .comm import destination


class Engine(abc.ABC):
    """Trains a built model on one run's devices and feeds a StepRecorder."""

    name: str = ""

    def __init__(self, spec: RunSpec, device_names: tuple[str, ...]) -> None:
        self.spec = spec
        self.device_names = device_names
        self.strategy = self.make_strategy()

    @abc.abstractmethod
    def make_strategy(self) -> tf.distribute.Strategy:
        """The tf.distribute strategy models are built and trained under."""

    def describe_all_reduce(self) -> str:
        return ""

    def build_scope(self) -> contextlib.AbstractContextManager:
        """Where the user's model is built and compiled: inside the strategy, for replicas."""
        return self.strategy.scope()

    def after_training(self, model: keras.Model, dataset: tf.data.Dataset) -> None:
        """Measurements that need the trained model but must not change it (before reporting)."""
        return None

    def result_fields(self, step_time_s: float | None) -> dict[str, Any]:
        """RunResult fields only this engine measures (after train)."""
        return {"extra": {"state_bytes": self.state_bytes, "parameter_bytes": self.parameter_bytes}}

    def train(
        self,
        model: keras.Model,
        dataset: tf.data.Dataset,
        steps_per_epoch: int,
        recorder: StepRecorder,
    ) -> None:
        with self.strategy.scope():
            model.optimizer.build(model.trainable_variables)  # slots beside their variables
        # Every replica holds the whole model and its optimizer state.
        state = variable_bytes([*model.weights, *model.optimizer.variables])
        # What an all-reduce moves per step: one gradient per trainable parameter.
        self.parameter_bytes = variable_bytes(model.trainable_variables)
        self.state_bytes = dict.fromkeys(self.device_names, state)
        check_budget(self.state_bytes, self.spec.memory_budget)
        if self.spec.mode == "explicit":
            self._train_explicit(model, dataset, steps_per_epoch, recorder)
        else:
            model.fit(
                dataset,
                epochs=self.spec.training.epochs,
                steps_per_epoch=steps_per_epoch,
                callbacks=[StepTimer(recorder)],
                verbose=0,
                shuffle=False,
            )

    def _train_explicit(
        self,
        model: keras.Model,
        dataset: tf.data.Dataset,
        steps_per_epoch: int,
        recorder: StepRecorder,
    ) -> None:
        strategy = self.strategy
        step = _explicit_step(strategy, model)
        distributed = strategy.experimental_distribute_dataset(dataset)
        iterator = iter(distributed)  # one iterator over the repeating data, as fit keeps
        recorder.train_begin()
        for _ in range(self.spec.training.epochs):
            recorder.epoch_begin()
            losses = []
            for _ in range(steps_per_epoch):
                losses.append(float(step(next(iterator))))  # float() waits for the step to end
                recorder.step_end()
            recorder.epoch_end({"loss": sum(losses) / len(losses)})


def _explicit_step(strategy: tf.distribute.Strategy, model: keras.Model) -> Any:
    """One compiled training step: per-replica gradients, an explicit sum, one update."""
    variables = model.trainable_variables

    def replica_gradients(x, y):
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            # The compiled loss already divides by the replica count under a strategy, so the
            # replicas' gradients sum to the gradient of the global batch's mean loss.
            loss = model.compute_loss(x=x, y=y, y_pred=predictions, training=True)
        return tape.gradient(loss, variables), loss

    @tf.function
    def step(batch):
        gradients, losses = strategy.run(replica_gradients, args=batch)
        # Reduce onto the devices each gradient already lives on: every replica gets the sum.
        summed = strategy.extended.batch_reduce_to(
            tf.distribute.ReduceOp.SUM, [(g, destination(g, strategy)) for g in gradients]
        )
        model.optimizer.apply_gradients(zip(summed, variables, strict=True))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step
