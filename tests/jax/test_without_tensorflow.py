"""The kit and a JAX run work where TensorFlow is not installed.

CI builds a virtual environment with the kit's pure-Python dependencies, Keras and JAX but no
TensorFlow (`.ci/run`, `pip install -e ".[jax]"`) and names its Python in GPK_NO_TF_PYTHON.
Elsewhere the same script runs in this environment with TensorFlow made unimportable in every
process it starts (a `sitecustomize` that refuses the import), which is what its absence looks
like to the kit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import sys
    import gpu_parallel_kit as gpk
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("tensorflow is importable here")
    devices = gpk.list_devices()
    assert len(devices) >= 2, devices
    exp = gpk.Experiment("mlp", "tabular", batch_size=64, steps_per_epoch=3, progress=False,
                         backend="jax")
    cmp = exp.compare(["single", "data", "tensor"], [1, 2])
    rows = cmp.table
    assert list(rows["status"]) == ["ok", "ok", "ok", "ok"], rows[["strategy", "reason"]]
    assert set(rows["backend"]) == {"jax"}
    assert "tensorflow" not in sys.modules
    print("ok", list(rows["strategy"]))
    """
)

BLOCKER = textwrap.dedent(
    """
    import sys

    class _NoTensorFlow:
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoTensorFlow())
    """
)


def test_a_jax_comparison_runs_without_tensorflow(tmp_path):
    python = os.environ.get("GPK_NO_TF_PYTHON")
    env = {**os.environ, "GPK_LOG": str(tmp_path / "runs.sqlite")}
    if not python:
        (tmp_path / "sitecustomize.py").write_text(BLOCKER)
        python = sys.executable
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), root])
    done = subprocess.run(
        [python, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok"), done.stdout
