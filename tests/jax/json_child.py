"""A counting script run in a fresh JAX interpreter, its answer read from its `JSON` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_json_script(script: str, cwd: Path, timeout: float) -> Any:
    """Run `script` with the kit importable and Keras on JAX; the object its "JSON..." line
    prints. A failing script fails the caller with the end of its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "jax"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("JSON"))
    return json.loads(line[4:])
