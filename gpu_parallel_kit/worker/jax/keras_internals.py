"""The private Keras names only JAX's runs read, behind one small function each; see
`worker/keras_internals.py`.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..keras_internals import changed, private


def set_seed_without_tensorflow(seed: int) -> None:
    """`keras.utils.set_random_seed` minus TensorFlow's seed: on JAX it would import TensorFlow
    (seconds, and its chatter) wherever it is installed, for a tf.data pipeline a JAX run has
    not. Python's, NumPy's and Keras's own global seed are set as it sets them."""
    import random  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    global_state = private("keras.src.backend.common", "global_state")
    seed_name = private("keras.src.utils.rng_utils", "GLOBAL_RANDOM_SEED")
    generator_name = private("keras.src.random.seed_generator", "GLOBAL_SEED_GENERATOR")
    global_state.set_global_attribute(seed_name, seed)
    global_state.set_global_attribute(generator_name, None)
    random.seed(seed)
    np.random.seed(seed)


def sublayers(layer: Any) -> list[Any]:
    """The layers `layer` holds: a model's `layers`, else the ones Keras tracks among a plain
    layer's attributes (`Layer._layers`: a block's own Dense layers), which have no public name."""
    public = getattr(layer, "layers", None)
    if public:
        return list(public)
    if not hasattr(layer, "_layers"):
        raise changed("Layer._layers")
    return list(layer._layers or [])


def place_initial_values_from_host() -> None:
    """Keras on JAX places each variable's value with `jax.device_put`, which in JAX 0.10.2
    builds a broken array (its shards unreadable) when the value is a JAX array on one device
    and the placement replicates it over several processes' devices; a NumPy value is placed
    right. From here on such a value is handed over as NumPy. For a worker process of a run over
    several; within one process nothing changes."""
    import jax  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    module = "keras.src.backend.jax.distribution_lib"
    original = private(module, "distribute_tensor")
    if getattr(original, "from_host", False):
        return

    def distribute_tensor(tensor: Any, layout: Any) -> Any:
        target = getattr(layout, "backend_layout", layout)
        if (
            isinstance(tensor, jax.Array)
            and not isinstance(tensor, jax.core.Tracer)
            and not getattr(target, "is_fully_addressable", True)
            and tensor.is_fully_addressable
        ):
            tensor = np.asarray(tensor)
        return original(tensor, layout)

    distribute_tensor.from_host = True  # type: ignore[attr-defined]
    importlib.import_module(module).distribute_tensor = distribute_tensor
