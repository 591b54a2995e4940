"""Imported first by every TensorFlow entry point: TensorFlow and Keras, without their chatter.

Its own module (not the package's `__init__`) so that the JAX entry points of `worker/` can be
imported where TensorFlow is not installed.
"""

from .quiet_start import import_tensorflow_quietly

import_tensorflow_quietly()
