"""The data-parallel recipe written out, shared by the data engine's `explicit` mode and by
multi-worker training.

Each replica computes gradients on its share of the global batch (`strategy.run`), the gradients
are summed across replicas by an explicit all-reduce (`batch_reduce_to`), and the user's compiled
optimizer applies one update to every copy of the variables. The user's compiled loss and metrics
drive it, so the loop trains what `fit` would train. Keras 3.15's `model.fit` fails under
MultiWorkerMirroredStrategy (keras#20585), which is why multi-worker runs always take this loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import keras
import tensorflow as tf

from ...keras_internals import compiled_metrics
from ...measuring.recorder import StepRecorder
from .comm import destination


def train_custom_loop(
    strategy: tf.distribute.Strategy,
    model: keras.Model,
    batches: Iterator[Any],
    epochs: int,
    steps_per_epoch: int,
    recorder: StepRecorder,
) -> None:
    """Train for `epochs` × `steps_per_epoch` steps on distributed batches from `batches`."""
    step = compiled_step(strategy, model)
    recorder.train_begin()
    for _ in range(epochs):
        recorder.epoch_begin()
        _reset_metrics(model)
        losses = []
        for _ in range(steps_per_epoch):
            losses.append(float(step(next(batches))))  # float() waits for the step to end
            recorder.step_end()
        recorder.epoch_end({"loss": sum(losses) / len(losses), **_metric_results(model)})
    if recorder.on_train_end is not None:
        recorder.on_train_end()


def compiled_step(strategy: tf.distribute.Strategy, model: keras.Model) -> Any:
    """One compiled training step: per-replica gradients, an explicit sum, one update."""
    variables = model.trainable_variables
    reached: list[Any] = []  # the variables the loss reaches, found when the step is traced

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            # The compiled loss already divides by the replica count under a strategy, so the
            # replicas' gradients sum to the gradient of the global batch's mean loss.
            loss = model.compute_loss(x=x, y=y, y_pred=predictions, training=True)
        _update_metrics(model, y, predictions)
        # A variable the loss does not reach (an unused pooler, an untied output embedding) has
        # no gradient: it is left out of the sum and the update, as Keras's own fit leaves it.
        gradients = tape.gradient(loss, variables)
        kept = [(g, v) for g, v in zip(gradients, variables, strict=True) if g is not None]
        reached[:] = [v for _, v in kept]
        return [g for g, _ in kept], loss

    @tf.function
    def step(batch):
        gradients, losses = strategy.run(replica_step, args=batch)
        # Reduce onto the devices each gradient already lives on: every replica gets the sum.
        summed = strategy.extended.batch_reduce_to(
            tf.distribute.ReduceOp.SUM, [(g, destination(g, strategy)) for g in gradients]
        )
        model.optimizer.apply_gradients(zip(summed, reached, strict=True))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step


def _update_metrics(model: keras.Model, y: Any, predictions: Any) -> None:
    # No walrus operator here: AutoGraph converts this function inside the traced step and cannot
    # convert a named expression (it warns "Cause: NamedExpr" in the user's notebook).
    metrics = compiled_metrics(model)
    if metrics is not None:
        metrics.update_state(y, predictions)


def _reset_metrics(model: keras.Model) -> None:
    metrics = compiled_metrics(model)
    if metrics is not None:
        metrics.reset_state()


def _metric_results(model: keras.Model) -> dict[str, float]:
    metrics = compiled_metrics(model)
    if metrics is None:
        return {}
    return {name: float(value) for name, value in metrics.result().items()}
