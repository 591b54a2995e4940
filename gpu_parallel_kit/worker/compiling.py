"""The user's model, loaded and compiled with the experiment's choices, on either backend.

Backend-free (Keras only), so a TensorFlow run and a JAX run build and compile the same way.
"""

from __future__ import annotations

import cloudpickle
import keras

from ..errors import GpkError
from ..runs.description.run_spec import TrainingConfig
from ..runs.description.sources import ModelSource
from .builtin_models import BUILDERS, default_compile_args
from .keras_internals import compile_config, user_metrics


class BuilderError(Exception):
    """The user's model or dataset builder raised; the worker reports the original error."""


def load_model(source: ModelSource) -> keras.Model:
    if source.kind == "builtin":
        return BUILDERS[source.name]()
    if source.kind == "file":
        return keras.models.load_model(source.name)
    builder = cloudpickle.loads(source.payload)
    try:
        model = builder()
    except Exception as error:
        raise BuilderError(f"the model builder {source.name} raised") from error
    if not isinstance(model, keras.Model):
        raise GpkError(
            f"the model builder {source.name} returned {type(model).__name__}, not a Keras model; "
            "make it return the model"
        )
    return model


def compile_model(
    model: keras.Model,
    source: ModelSource,
    training: TrainingConfig,
    steps_per_execution: int = 1,
    jit_compile: bool | str = "auto",
) -> None:
    """Compile with the experiment's choices, else the model's own, else the built-in defaults.

    `steps_per_execution` and `jit_compile` come from tune (runs/description/tuning_rules.py), which
    already let the user's own values win; "auto" leaves XLA to Keras (off under a strategy)."""
    given = {"optimizer": resolved(training.optimizer), "loss": resolved(training.loss)}
    if training.metrics:
        given["metrics"] = list(training.metrics)
    given = {k: v for k, v in given.items() if v is not None}
    if getattr(model, "compiled", False) and not given:
        args = {
            "optimizer": model.optimizer,
            "loss": model.loss,
            "metrics": user_metrics(model),
        }
    elif source.kind == "builtin":
        args = {**default_compile_args(), **given}
    else:
        args = dict(given)
        if getattr(model, "compiled", False):
            args.setdefault("optimizer", model.optimizer)
            args.setdefault("loss", model.loss)
    if args.get("loss") is None or args.get("optimizer") is None:
        raise GpkError(
            "the model comes uncompiled; compile it in the builder or pass optimizer= and loss= "
            "to the Experiment (e.g. optimizer='adam', loss='sparse_categorical_crossentropy')"
        )
    if compile_config(model).get("run_eagerly"):
        # The user asked for eager execution (to debug, or to compare with eager code): keep it.
        args["run_eagerly"] = True
    # Recompiling inside the strategy scope builds the optimizer's slots on the run's devices.
    if compile_config(model).get("run_eagerly"):
        jit_compile = False  # Keras would refuse XLA with eager execution, with a warning
    model.compile(**args, steps_per_execution=steps_per_execution, jit_compile=jit_compile)


def resolved(value):
    """An experiment's optimizer or loss as Keras takes it: strings pass through, a config dict
    is deserialized, a zero-argument factory is called here."""
    if callable(value) and not isinstance(value, str | dict) and not hasattr(value, "get_config"):
        return value()
    if isinstance(value, dict) and "class_name" in value:
        return keras.saving.deserialize_keras_object(value)
    return value
