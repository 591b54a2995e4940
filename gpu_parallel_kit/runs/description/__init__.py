"""What one run is: its spec, model and data sources, devices, options and rules."""
