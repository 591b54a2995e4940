"""A comparison's runs: its grid, rounds, processes started ahead and the training gate."""
