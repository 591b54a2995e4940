"""What one run is, on the caller's side: its spec, devices, sources and result; no TensorFlow."""
