"""The `gpk` command line (entry point `gpu_parallel_kit.cli:main`)."""

from .main import main

__all__ = ["main"]
