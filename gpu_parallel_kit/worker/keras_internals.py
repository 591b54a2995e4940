"""Every private Keras name both backends' workers rely on, behind one small function each.

TensorFlow's runs' own are in `tensorflow/keras_internals.py`, JAX's in `jax/keras_internals.py`.
Keras offers no public way to rebuild a model's compiled loss and metrics, to undo the loss
scaling it applies inside a distribution strategy, or to tell a learning-rate variable from a
schedule once an optimizer is built, so the kit reads them in these three modules only.
`pyproject.toml` pins Keras to the minor version they were verified on, and each access raises
`KerasInternalsChanged`, naming the missing piece, instead of an AttributeError inside a run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

VERIFIED_KERAS = "3.15"  # the minor version every access below was checked on


class KerasInternalsChanged(RuntimeError):
    """The installed Keras no longer has a private piece the kit uses."""


def changed(what: str) -> KerasInternalsChanged:
    """The error for a private piece `what` the installed Keras no longer has."""
    import keras  # noqa: PLC0415 - only for the version in the message

    return KerasInternalsChanged(
        f"Keras {keras.__version__} no longer has {what}, which gpu_parallel_kit uses; install "
        f"the Keras it was verified with: pip install 'keras>={VERIFIED_KERAS},<3.16'"
    )


def private(module: str, name: str) -> Any:
    """`module.name`, or `KerasInternalsChanged` when Keras no longer has it."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise changed(f"{module}.{name}") from None


def compile_config(model: Any) -> dict[str, Any]:
    """The arguments the model was compiled with (loss, metrics, loss_weights, ...); {} when
    the model was never compiled."""
    if not getattr(model, "compiled", False):
        return {}
    config = getattr(model, "_compile_config", None)
    if config is None or not hasattr(config, "config"):
        raise changed("model._compile_config.config")
    return dict(config.config or {})


def compiled_metrics(model: Any) -> Any:
    """The compiled metrics (accuracy and the like) as one container, or None without metrics."""
    if not hasattr(model, "_compile_metrics"):
        raise changed("model._compile_metrics")
    return model._compile_metrics


def user_metrics(model: Any) -> list[Any]:
    """The metrics as the user passed them to `compile`, to compile the model again with them."""
    container = compiled_metrics(model)
    if container is None:
        return []
    if not hasattr(container, "_user_metrics"):
        raise changed("CompileMetrics._user_metrics")
    return list(container._user_metrics or [])


def raw_learning_rate(optimizer: Any) -> Any:
    """What the optimizer holds as its rate: a Variable for a number, else the schedule itself
    (the public `learning_rate` is already evaluated at the current step)."""
    if not hasattr(optimizer, "_learning_rate"):
        raise changed("optimizer._learning_rate")
    return optimizer._learning_rate


def compile_loss_class() -> type:
    """`CompileLoss`: the container `model.compile` builds from `loss=` and `loss_weights=`."""
    return private("keras.src.trainers.compile_utils", "CompileLoss")


def is_functional(model: Any) -> bool:
    """Whether `model` is a graph of layer calls (a functional model, keras-hub's backbones among
    them), whose graph can be run call by call."""
    return isinstance(model, private("keras.src.models.functional", "Functional"))


def run_calls(model: Any, inputs: Any, call: Callable[..., Any]) -> Any:
    """`model`'s outputs on the symbolic `inputs`, each of its layer calls made through
    `call(layer, *args, **kwargs)`, as `keras.models.clone_model` does with `call_function`."""
    run = getattr(model, "_run_through_graph", None)
    struct = getattr(model, "_inputs_struct", None)
    if run is None or struct is None:
        raise changed("Functional._inputs_struct and _run_through_graph")
    # The tensors as given, not `_standardize_inputs`'s converted copies: every tensor a call
    # reads must be one the caller already knows. A dict is matched to the inputs by name.
    if isinstance(struct, dict) and isinstance(inputs, dict):
        inputs = {name: inputs[name] for name in struct}
    outputs = run(inputs, operation_fn=lambda layer: layer, call_fn=call)
    return outputs[0] if isinstance(outputs, list | tuple) and len(outputs) == 1 else outputs
