"""The kit's version, apart from the package's `__init__` so a worker can read it without
importing the API."""

__version__ = "0.1.0"
