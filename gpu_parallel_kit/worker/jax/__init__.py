"""JAX runs: the skeleton's steps on Keras's `keras.distribution` (`run`), one class per
strategy (`strategies`), the batches read as fit asks (`feed`), devices, layout and
communication, and the server runs are forked from (`server`). No TensorFlow is imported, and
nothing is imported here."""
