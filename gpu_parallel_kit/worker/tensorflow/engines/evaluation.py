"""Validation inside the worker: the loss and metrics on held-out data, between training steps.

The evaluation uses the user's compiled loss and metrics, rebuilt fresh from the compile
configuration, so it never touches the metric state `fit` or the explicit loop accumulate for
the training logs (Keras's own `evaluate` would reset it, which breaks an evaluation in the middle
of an epoch). The forward pass is the engine's: the model itself for single and data parallel
runs (its replicas hold the same weights, so the first one answers), the stages in order for model
parallel runs. The recorder pauses its clock around every evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from ....runs.description.run_spec import RunSpec
from ...keras_internals import compile_config
from ...measuring.recorder import StepRecorder
from ..datasets import make_validation_dataset
from ..keras_internals import (
    compile_loss_class,
    compile_metrics_class,
    unscale_loss_for_distribution,
)

Predict = Callable[[Any], tuple[Any, Any]]  # x -> (predictions, regularization loss)


class Evaluator:
    """Mean loss (with the model's regularization losses, as Keras reports it) and every compiled
    metric over one pass of the validation batches, named as Keras names them: val_loss, val_...

    >>> Evaluator(model, batches, predict)()  # {"val_loss": 0.31, "val_accuracy": 0.9}
    """

    def __init__(self, model: keras.Model, batches: tf.data.Dataset, predict: Predict) -> None:
        config = compile_config(model)
        outputs = getattr(model, "output_names", None)
        loss = config.get("loss", model.loss)
        self._loss = compile_loss_class()(loss, config.get("loss_weights"), output_names=outputs)
        metrics, weighted = _fresh(config.get("metrics")), _fresh(config.get("weighted_metrics"))
        self._metrics = (
            compile_metrics_class()(metrics, weighted, output_names=outputs)
            if metrics or weighted
            else None
        )
        self._batches = batches
        self._predict = predict
        # The first batch runs eagerly and builds the loss and metric containers; the rest go
        # through one compiled function (building variables inside it is not allowed).
        self._built = False
        self._compiled_update = tf.function(self._update, reduce_retracing=True)

    def __call__(self) -> dict[str, float]:
        if self._metrics is not None:
            self._metrics.reset_state()
        sums, count = [], 0
        for x, y in self._batches:
            update = self._compiled_update if self._built else self._update
            sums.append(update(x, y))  # no sync per batch
            self._built = True
            count += int(tf.nest.flatten(x)[0].shape[0])
        values = {"val_loss": float(tf.add_n(sums)) / count if count else float("nan")}
        if self._metrics is not None and count:
            for name, value in self._metrics.result().items():
                values[f"val_{name}"] = float(value)
        return values

    def _update(self, x: Any, y: Any) -> tf.Tensor:
        """One batch: update the metrics, return its summed loss (mean × batch size)."""
        predictions, regularization = self._predict(x)
        # The compiled loss divides by the replica count inside a strategy; undo it as Keras's
        # own loss tracker does, so the figure is the plain mean whatever the context.
        loss = unscale_loss_for_distribution(self._loss(y, predictions))
        if self._metrics is not None:
            self._metrics.update_state(y, predictions)
        size = tf.cast(tf.shape(tf.nest.flatten(x)[0])[0], tf.float32)
        return (tf.cast(loss, tf.float32) + tf.cast(regularization, tf.float32)) * size


def _fresh(metrics: Any) -> Any:
    """The compiled metrics with every Metric object copied: the copies keep their own state."""
    if isinstance(metrics, keras.metrics.Metric):
        return type(metrics).from_config(metrics.get_config())
    if isinstance(metrics, list | tuple):
        return [_fresh(m) for m in metrics]
    if isinstance(metrics, dict) and "class_name" not in metrics:
        return {key: _fresh(m) for key, m in metrics.items()}
    return metrics


def watch_convergence(
    recorder: StepRecorder, engine: Any, model: keras.Model, spec: RunSpec
) -> None:
    """Give the recorder the learning rate to log and, with validation data, the evaluation."""

    def learning_rate() -> float:
        return float(keras.ops.convert_to_numpy(engine.live_optimizer(model).learning_rate))

    recorder.learning_rate = learning_rate
    validation = spec.training.validation
    if validation is None:
        return
    batches = make_validation_dataset(validation, spec.global_batch)
    recorder.evaluate = Evaluator(model, batches, lambda x: engine.predict(model, x))
    recorder.evaluate_every_steps = spec.training.validation_every_steps
