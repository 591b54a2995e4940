"""Runs on the caller's side, no TensorFlow: description, processes, scheduling and results."""
