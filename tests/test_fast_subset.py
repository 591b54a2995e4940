"""The fast subset (`pytest -m "not slow"`) imports neither TensorFlow nor JAX, in collection too.

Pytest imports every test module to collect it, slow-marked or not, so a module-level
`import keras` in a slow module still loads TensorFlow into the fast subset. This test collects
the fast subset in a fresh interpreter and looks at what it imported. After the tests themselves
run, `conftest.pytest_sessionfinish` fails a fast-subset run that imported either, naming the test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COLLECT = textwrap.dedent(
    """
    import sys
    import pytest

    code = pytest.main(["-m", "not slow", "--collect-only", "-q", "-p", "no:cacheprovider"])
    heavy = [name for name in ("tensorflow", "jax") if name in sys.modules]
    print("imported:", ", ".join(heavy) or "neither")
    sys.exit(int(code) or bool(heavy))
    """
)


def test_collecting_the_fast_subset_imports_neither_tensorflow_nor_jax():
    done = subprocess.run(
        [sys.executable, "-c", COLLECT], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    last = done.stdout.strip().splitlines()[-3:]
    assert done.returncode == 0, "\n".join(last) + done.stderr[-2000:]
    assert last[-1] == "imported: neither"
