"""The names of the data's inputs against the model's, checked on either backend before training.

Keras matches inputs given as a dict to the model's inputs by name, but only inside the first
step, and says so in its own words (`Missing data for input "a"`). Here the keys are checked as
soon as the model is built, in one sentence naming both; a mismatch is the experiment's, not one
run's, so its row says that no other run of a comparison would fare better
(`runs/processes/failure_reasons.refused_for_every_run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from ..errors import GpkError
from ..runs.processes.failure_reasons import EVERY_RUN


def check_input_names(model: keras.Model, x: Any) -> None:
    """A dict of inputs must hold every input the model names.

    Args:
        model: the built Keras model; one without named inputs (subclassed, or built from the
            data) is left to Keras.
        x: the inputs' structure: arrays, `tf.TensorSpec`s or anything keyed like them.

    Raises:
        GpkError: when a name the model takes is not a key of `x`.
    """
    names = input_names(model)
    if not isinstance(x, Mapping) or not names or all(name in x for name in names):
        return
    error = GpkError(
        f"the data's inputs are named {_listed(x)} but the model's are named {_listed(names)}; "
        f"key x by the model's input names, e.g. data=({_example(names)}, y), or rename the "
        "model's inputs (keras.Input(..., name=...))"
    )
    error.extra = {EVERY_RUN: True}  # kept on the failed row (worker/skeleton.py)
    raise error


def input_names(model: keras.Model) -> list[str]:
    """The names Keras matches a dict of inputs against, in its order; none for a model
    whose inputs are not all named."""
    try:
        specs = keras.tree.flatten(model.input_spec) if model.input_spec else []
    except (AttributeError, ValueError):
        return []  # a model that has no input spec until it is called
    names = [getattr(spec, "name", None) for spec in specs]
    return [str(name) for name in names] if names and all(names) else []


def _listed(names: Any) -> str:
    return ", ".join(repr(str(name)) for name in names)


def _example(names: list[str]) -> str:
    return "{" + ", ".join(f"{name!r}: ..." for name in names) + "}"
