"""`pipeline` on TensorFlow: the model cut into stages, each stage's passes on its device."""
