"""What the measurements mean: tables, speedup baselines, advice, convergence, the cost model and
its projections; no TensorFlow and no matplotlib."""
