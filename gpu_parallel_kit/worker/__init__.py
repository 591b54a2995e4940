"""The child process of a run: the only room that imports TensorFlow, Keras and JAX.

The caller never imports it; `runs.processes.child_process` starts its entry points by name in a
fresh process. One run skeleton (`skeleton`) serves both backends, `tensorflow/` (one engine per
strategy) and `jax/` (one class per strategy in `jax/strategies.py`); what is backend-free is
shared here. Every module that imports TensorFlow lives in `tensorflow/` (whose entry points
import it first through `tensorflow.tensorflow_first`, to filter its start-up chatter once), every
one that imports JAX in `jax/`, so a JAX run needs no TensorFlow. Nothing is imported here.
"""
