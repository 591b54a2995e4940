"""A plain script's terminal during multi-worker runs: no native log line of TensorFlow, JAX or
absl from the worker processes, read at the script's own file descriptor 2."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

# absl's and glog's prefix ("E0000 00:00:1796347186.101349    5608 cuda_platform.cc:52] ..."),
# and what such lines name.
NATIVE = re.compile(r"^[IWE]\d{4} \d\d:\d\d:|cuInit|absl|external/local_xla", re.MULTILINE)

SCRIPT = """
import gpu_parallel_kit as gpk

exp = gpk.Experiment(
    model="mlp", data="tabular", batch_size=64, steps_per_epoch=3, progress=False
)
rows = exp.compare(["multiworker"], [1], workers=2).results
rows += [exp.run("data", devices=1, workers=2, backend="jax")]
print([(r.backend, r.status, r.reason) for r in rows])
"""


def _script_output(script: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,  # pipes: the script's own descriptors, its workers' too
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


def test_workers_of_both_backends_write_no_native_log_lines():
    out, err = _script_output(SCRIPT)
    assert out.count("'ok'") == 2, out
    assert not NATIVE.search(err), err


def test_a_workers_python_error_still_reaches_the_terminal():
    out, err = _script_output(
        """
        import gpu_parallel_kit as gpk

        def broken():
            raise RuntimeError("the builder broke on purpose")

        exp = gpk.Experiment(
            model=broken, data="tabular", batch_size=64, steps_per_epoch=3, progress=False
        )
        row = exp.run("multiworker", devices=1, workers=2)
        print(row.status, row.reason)
        """
    )
    assert "the builder broke on purpose" in out, out  # the row's reason
    assert "RuntimeError: the builder broke on purpose" in err, err  # the worker's traceback
    assert not NATIVE.search(err), err
