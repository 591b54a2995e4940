"""The private Keras names only JAX's runs read, behind one small function each; see
`worker/keras_internals.py`.
"""

from __future__ import annotations

from ..keras_internals import private


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
