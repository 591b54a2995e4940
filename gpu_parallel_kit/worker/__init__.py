"""The child process of a run: the only room that imports TensorFlow, Keras and JAX.

The caller never imports it; `runs.processes.child_process` starts its entry points by name in a
fresh process. One run skeleton (`skeleton`) serves both backends: `tensorflow/` (the fork server's
runs, one engine per strategy under `tensorflow/engines/`) and `jax/` (the JAX server's runs, one
class per strategy in `jax/strategies.py`) plug in behind its small protocol. What is backend-free
is shared (the recorder, the batch order, the built-in models, compiling, the memory budget). The
TensorFlow entry points (`tensorflow.run`, `tensorflow.member`, `tensorflow.device_setup`) import
TensorFlow first through `tensorflow.tensorflow_first`, so its start-up chatter is filtered out
once, and the JAX entry points (`jax.server`, `jax.run`, `jax.device_setup`) never import it, so
a JAX run needs no TensorFlow. Every module that imports TensorFlow lives in `tensorflow/`, every
one that imports JAX in `jax/`; the modules here import neither.
Nothing is imported here.
"""
