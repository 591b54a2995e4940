"""`pipeline` on JAX: the stages' compiled passes, the runner of the schedule's task lists, and
what the run reports of them. Nothing is imported here."""
