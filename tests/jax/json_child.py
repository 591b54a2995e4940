"""A counting script run in a fresh JAX interpreter, its answer read from its `JSON` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Run first in a script that must count without TensorFlow: importing it fails, as where it is
# not installed.
WITHOUT_TENSORFLOW = """
import sys

class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError(name, name=name)

sys.meta_path.insert(0, _NoTensorFlow())
"""


def run_json_script(
    script: str, cwd: Path, timeout: float, without_tensorflow: bool = False
) -> Any:
    """Run `script` with the kit importable and Keras on JAX (and, `without_tensorflow`, no
    TensorFlow importable); the object its "JSON..." line prints. A failing script fails the
    caller with the end of its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "jax"}
    source = WITHOUT_TENSORFLOW + script if without_tensorflow else script
    done = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("JSON"))
    return json.loads(line[4:])
