"""The training options, written once for `gpk` and `%gpk`, and their one mapping onto the API."""
