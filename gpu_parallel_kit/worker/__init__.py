"""The child process of a run: the only room that imports TensorFlow, Keras and JAX.

The caller never imports it; `runs.process` starts its entry points by name in a fresh process.
TensorFlow runs and JAX runs share what is backend-free here (the recorder, the batch order, the
built-in models, compiling); the TensorFlow entry points (`main`, `member`, `device_setup`) import
TensorFlow first through `tensorflow_first`, so its start-up chatter is filtered out once, and the
JAX entry points (`jax_server`, `jax_main`) never import it, so a JAX run needs no TensorFlow.
"""
