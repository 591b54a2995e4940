"""The `gpk` command line (entry point `gpu_parallel_kit.cli:main`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `gpk`: the command's servers start (`launch`), then the command line's
    modules are imported and the command runs (`commands.main`); returns the exit status."""
    from .launch import start_servers

    start_servers(list(sys.argv[1:] if argv is None else argv))
    from .commands import main as run

    return run(argv)


__all__ = ["main"]
