"""Pure pipeline logic: schedules as data, the partition solver and the step simulation."""
