"""The private Keras names only TensorFlow's runs read (the engines' evaluation, explicit loop,
fast path and pipeline stages), behind one small function each; see `worker/keras_internals.py`.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from ..keras_internals import changed, private

# Read by both backends' pipelines, so kept at the worker's root; re-exported for the engines.
from ..keras_internals import compile_loss_class as compile_loss_class
from ..keras_internals import is_functional as is_functional
from ..keras_internals import run_calls as run_calls


def compile_metrics_class() -> type:
    """`CompileMetrics`: the container `model.compile` builds from `metrics=`."""
    return private("keras.src.trainers.compile_utils", "CompileMetrics")


# Called inside compiled functions (the evaluation's update), AutoGraph would otherwise follow
# the lookup into importlib and warn on stderr that it cannot convert it.
@tf.autograph.experimental.do_not_convert
def unscale_loss_for_distribution(loss: Any) -> Any:
    """A compiled loss divided by the replica count inside a strategy, multiplied back."""
    return private("keras.src.losses.loss", "unscale_loss_for_distribution")(loss)


def dispatches_async(callbacks: list[Any]) -> bool:
    """Whether `fit` would call these callbacks' batch hooks from a thread, the training loop
    not waiting for them (`CallbackList._async_train`): only on a backend Keras marks thread-safe
    (`IS_THREAD_SAFE`: not TensorFlow), and only when every per-batch callback is async-safe."""
    import keras  # noqa: PLC0415 - the worker has it imported already

    container = keras.callbacks.CallbackList(list(callbacks))
    if not hasattr(container, "_async_train"):
        raise changed("CallbackList._async_train")
    return bool(container._async_train)


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
        raise changed("Trainer._symbolic_build and _maybe_symbolic_build")
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
        raise changed("Trainer._flatten_layers, _compile_metrics and _compile_loss") from None
    return (
        all(layer.built for layer in layers)
        and (metrics is None or metrics.built)
        and (loss is None or loss.built)
        and (model.optimizer is None or model.optimizer.built)
    )
