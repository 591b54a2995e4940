"""The user's cache folder, which outlives every process: the plan search's counts
(`planning/step_count.py`) and JAX's compiled programs (`worker/jax/device_setup.py`).

`$GPK_CACHE_DIR`, else `$XDG_CACHE_HOME/gpu_parallel_kit`, else `~/.cache/gpu_parallel_kit`: kept
across reboots, unlike the system's temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_folder() -> Path:
    """Where the kit keeps what it may compute again, across sessions."""
    given = os.environ.get("GPK_CACHE_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpu_parallel_kit"
