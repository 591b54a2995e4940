"""The child process of a run: the only room that imports TensorFlow and Keras.

The caller never imports it; `runs.process` starts its entry points by name in a fresh process.
TensorFlow is imported here first, whichever entry point is started, so that its start-up
chatter is filtered out once (`quiet_start`).
"""

from .quiet_start import import_tensorflow_quietly

import_tensorflow_quietly()
