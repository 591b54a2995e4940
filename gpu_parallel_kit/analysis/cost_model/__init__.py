"""What hardware the user does not have would do: the step-time model, the GPU and link
presets, the roofline, and the projected rows built from measured runs."""
