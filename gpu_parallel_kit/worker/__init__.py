"""The child process of a run: the only room that imports TensorFlow and Keras.

The caller never imports it; `runs.process` starts its entry points by name in a fresh process.
"""
