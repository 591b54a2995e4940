"""Every private Keras name the kit relies on, behind one small function each.

Keras offers no public way to rebuild a model's compiled loss and metrics, to undo the loss scaling
it applies inside a distribution strategy, or to tell a learning-rate variable from a schedule
once an optimizer is built. The kit needs all of these (evaluation, the explicit loop, the
learning-rate rule), so it reads them here and nowhere else. `pyproject.toml` pins Keras to the
minor version these accesses were verified on; `tests/worker/test_keras_internals.py` exercises
each one against the installed Keras, and each access raises `KerasInternalsChanged`, naming the
missing piece and the supported version, instead of an AttributeError deep inside a run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

VERIFIED_KERAS = "3.15"  # the minor version every access below was checked on


class KerasInternalsChanged(RuntimeError):
    """The installed Keras no longer has a private piece the kit uses."""


def _changed(what: str) -> KerasInternalsChanged:
    import keras  # noqa: PLC0415 - only for the version in the message

    return KerasInternalsChanged(
        f"Keras {keras.__version__} no longer has {what}, which gpu_parallel_kit uses; install "
        f"the Keras it was verified with: pip install 'keras>={VERIFIED_KERAS},<3.16'"
    )


def _private(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise _changed(f"{module}.{name}") from None


def compile_loss_class() -> type:
    """`CompileLoss`: the container `model.compile` builds from `loss=` and `loss_weights=`."""
    return _private("keras.src.trainers.compile_utils", "CompileLoss")


def compile_metrics_class() -> type:
    """`CompileMetrics`: the container `model.compile` builds from `metrics=`."""
    return _private("keras.src.trainers.compile_utils", "CompileMetrics")


def _not_autographed(function: Callable[..., Any]) -> Callable[..., Any]:
    """Left unconverted by AutoGraph, when TensorFlow is there: called inside compiled functions
    (the evaluation's update), AutoGraph would otherwise follow the lookup into importlib and warn
    on stderr that it cannot convert it. Imported here, not at the top, so that the JAX path of
    the worker, which also reads these names, needs no TensorFlow."""
    import keras  # noqa: PLC0415

    if keras.backend.backend() != "tensorflow":
        return function
    import tensorflow as tf  # noqa: PLC0415

    return tf.autograph.experimental.do_not_convert(function)


@_not_autographed
def unscale_loss_for_distribution(loss: Any) -> Any:
    """A compiled loss divided by the replica count inside a strategy, multiplied back."""
    return _private("keras.src.losses.loss", "unscale_loss_for_distribution")(loss)


def compile_config(model: Any) -> dict[str, Any]:
    """The arguments the model was compiled with (loss, metrics, loss_weights, ...); {} when
    the model was never compiled."""
    if not getattr(model, "compiled", False):
        return {}
    config = getattr(model, "_compile_config", None)
    if config is None or not hasattr(config, "config"):
        raise _changed("model._compile_config.config")
    return dict(config.config or {})


def compiled_metrics(model: Any) -> Any:
    """The compiled metrics (accuracy and the like) as one container, or None without metrics."""
    if not hasattr(model, "_compile_metrics"):
        raise _changed("model._compile_metrics")
    return model._compile_metrics


def user_metrics(model: Any) -> list[Any]:
    """The metrics as the user passed them to `compile`, to compile the model again with them."""
    container = compiled_metrics(model)
    if container is None:
        return []
    if not hasattr(container, "_user_metrics"):
        raise _changed("CompileMetrics._user_metrics")
    return list(container._user_metrics or [])


def raw_learning_rate(optimizer: Any) -> Any:
    """What the optimizer holds as its rate: a Variable for a number, else the schedule itself
    (the public `learning_rate` is already evaluated at the current step)."""
    if not hasattr(optimizer, "_learning_rate"):
        raise _changed("optimizer._learning_rate")
    return optimizer._learning_rate


def set_seed_without_tensorflow(seed: int) -> None:
    """`keras.utils.set_random_seed` minus TensorFlow's seed: on JAX it would import TensorFlow
    (seconds, and its chatter) wherever it is installed, for a tf.data pipeline a JAX run has
    not. Python's, NumPy's and Keras's own global seed are set as it sets them."""
    import random  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    global_state = _private("keras.src.backend.common", "global_state")
    seed_name = _private("keras.src.utils.rng_utils", "GLOBAL_RANDOM_SEED")
    generator_name = _private("keras.src.random.seed_generator", "GLOBAL_SEED_GENERATOR")
    global_state.set_global_attribute(seed_name, seed)
    global_state.set_global_attribute(generator_name, None)
    random.seed(seed)
    np.random.seed(seed)


def dispatches_async(callbacks: list[Any]) -> bool:
    """Whether `fit` would call these callbacks' batch hooks from a thread, the training loop
    not waiting for them (`CallbackList._async_train`): only on a backend Keras marks thread-safe
    (`IS_THREAD_SAFE`: not TensorFlow), and only when every per-batch callback is async-safe."""
    import keras  # noqa: PLC0415 - the worker has it imported already

    container = keras.callbacks.CallbackList(list(callbacks))
    if not hasattr(container, "_async_train"):
        raise _changed("CallbackList._async_train")
    return bool(container._async_train)


def is_functional(model: Any) -> bool:
    """Whether `model` is a graph of layer calls (a functional model, keras-hub's backbones among
    them), whose graph can be run call by call."""
    return isinstance(model, _private("keras.src.models.functional", "Functional"))


def run_calls(model: Any, inputs: Any, call: Callable[..., Any]) -> Any:
    """`model`'s outputs on the symbolic `inputs`, each of its layer calls made through
    `call(layer, *args, **kwargs)`, as `keras.models.clone_model` does with `call_function`."""
    run = getattr(model, "_run_through_graph", None)
    struct = getattr(model, "_inputs_struct", None)
    if run is None or struct is None:
        raise _changed("Functional._inputs_struct and _run_through_graph")
    # The tensors as given, not `_standardize_inputs`'s converted copies: every tensor a call
    # reads must be one the caller already knows. A dict is matched to the inputs by name.
    if isinstance(struct, dict) and isinstance(inputs, dict):
        inputs = {name: inputs[name] for name in struct}
    outputs = run(inputs, operation_fn=lambda layer: layer, call_fn=call)
    return outputs[0] if isinstance(outputs, list | tuple) and len(outputs) == 1 else outputs


def spare_fits_symbolic_build(model: Any, element_spec: Any) -> bool:
    """Build what `fit` builds before its first step (the model, its compiled loss and metrics,
    the optimizer) from the dataset's element spec, so that `fit` need not build them itself.

    Under a distribution strategy, TensorFlow's `fit` (`_maybe_symbolic_build`) makes a whole
    distributed iterator and all-reduces a batch across the replicas only to read its shapes:
    0.3 s of CPU in a run's start on 4 virtual devices, 0.1-0.15 s on 2. Call it inside the
    strategy's scope, as `fit` builds there. `fit` still builds for itself whenever something is
    unbuilt again when it asks (a model compiled anew). True when everything was built."""
    build = getattr(model, "_symbolic_build", None)
    keras_own = getattr(model, "_maybe_symbolic_build", None)
    if build is None or keras_own is None:
        raise _changed("Trainer._symbolic_build and _maybe_symbolic_build")
    build(data_batch=element_spec)

    def maybe_symbolic_build(iterator: Any = None, data_batch: Any = None) -> None:
        if not _built_for_fit(model):
            keras_own(iterator=iterator, data_batch=data_batch)

    object.__setattr__(model, "_maybe_symbolic_build", maybe_symbolic_build)
    return _built_for_fit(model)


def _built_for_fit(model: Any) -> bool:
    """What `Trainer._symbolic_build` checks before building anything."""
    try:
        layers = model._flatten_layers()
        metrics, loss = model._compile_metrics, model._compile_loss
    except AttributeError:
        raise _changed("Trainer._flatten_layers, _compile_metrics and _compile_loss") from None
    return (
        all(layer.built for layer in layers)
        and (metrics is None or metrics.built)
        and (loss is None or loss.built)
        and (model.optimizer is None or model.optimizer.built)
    )
