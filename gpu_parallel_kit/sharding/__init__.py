"""Tensor parallelism as data: which dimension of which weight is split over the model axis, and
what the collectives of such a layout move per step. Pure Python, no TensorFlow, JAX or Keras."""
