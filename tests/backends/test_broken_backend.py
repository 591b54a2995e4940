"""A backend that is installed but broken (a library missing, mismatched versions) is one sentence
at the first run or device listing, naming the cause and the fix: never a traceback, never a
server's stderr, and never taken for an out-of-memory machine."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpu_parallel_kit.errors import BackendUnavailable
from gpu_parallel_kit.runs.description import device_choice

CAUSE = "libexample.so.1: cannot open shared object file"
RUN = ["run", "--strategy", "single", "--model", "mlp", "--data", "tabular"]
TENSORFLOW_SAID = f"TensorFlow could not list this machine's devices (ImportError: {CAUSE})"


def _gpk_with_broken(package: str, args: list[str], tmp_path) -> subprocess.CompletedProcess:
    """`gpk args` where importing `package` raises ImportError(CAUSE), as a broken install does."""
    site = tmp_path / "site"
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(f"raise ImportError({CAUSE!r})\n")
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "GPK_LOG": str(tmp_path / "runs.sqlite")}
    command = [sys.executable, "-m", "gpu_parallel_kit.cli", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False
    )


@pytest.mark.parametrize(
    ("package", "args", "said"),
    [
        ("tensorflow", ["devices"], TENSORFLOW_SAID),
        ("tensorflow", RUN, TENSORFLOW_SAID),
        (
            "jax",
            [*RUN, "--backend", "jax"],
            "JAX could not list this machine's devices (importing JAX and Keras failed: "
            f"ImportError: {CAUSE})",
        ),
    ],
    ids=["tensorflow-devices", "tensorflow-run", "jax-run"],
)
def test_a_broken_backend_is_one_sentence_with_its_cause_and_the_fix(package, args, said, tmp_path):
    done = _gpk_with_broken(package, args, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"gpk: error: {said}")
    assert f'python -c "import {package}" works in this environment' in lines[0]


def test_a_failed_discovery_is_asked_again_once_the_install_is_repaired(monkeypatch):
    answers = [RuntimeError(f"ImportError: {CAUSE}"), (device_choice.host_cpu(),)]

    def discovery(entry, **_):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(device_choice, "call_in_worker", discovery)
    device_choice._discover.cache_clear()
    try:
        with pytest.raises(BackendUnavailable, match=r"^TensorFlow could not list .*libexample"):
            device_choice.discover_physical_devices("tensorflow")
        assert device_choice.discover_physical_devices("tensorflow") == (device_choice.host_cpu(),)
    finally:
        device_choice._discover.cache_clear()
