"""Runs on a Slurm cluster: one allocation the kit holds, each run a job step inside it."""
