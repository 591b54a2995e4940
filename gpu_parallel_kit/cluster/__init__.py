"""Multi-worker runs: cluster files, the local launcher, the coordinator and `gpk worker`."""
