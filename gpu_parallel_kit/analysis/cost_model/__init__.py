"""What hardware the user does not have would do: the step-time model, the pipeline replay, the
GPU and link presets, the roofline, the projected rows built from measured runs, and the plan
search's arithmetic: model cards, parallel plans, their memory, step and ranking."""
