"""The JAX server ends quietly with its kernel.

A kernel's shutdown signals its whole process group: first SIGINT (jupyter_client interrupts
before it asks the kernel to shut down), then SIGTERM. The server must write nothing then: no
`Process gpk-jax-server: Traceback ... KeyboardInterrupt` in the terminal that runs JupyterLab,
whether the signal finds it idle or still starting (importing JAX and Keras).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

# A kernel's stand-in: Ctrl-C handled (not ignored, which its children would inherit), the
# server started, its process group interrupted over and over from the server's first moment
# until well after it is idle, then the end every kernel has (daemon children terminated).
KERNEL = textwrap.dedent(
    """
    import os, signal, time
    signal.signal(signal.SIGINT, lambda *_: None)
    from gpu_parallel_kit.runs.processes.server_client import JaxServer
    server = JaxServer()
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        os.killpg(0, signal.SIGINT)
        time.sleep(0.02)
    print("alive" if server.alive else "gone", flush=True)
    """
)


def test_the_server_ignores_the_kernels_interrupts_from_its_start_and_ends_without_a_word():
    kernel = subprocess.run(
        [sys.executable, "-c", KERNEL],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,  # as jupyter_client starts a kernel: its own process group
    )
    assert kernel.stdout.strip() == "alive", kernel.stderr
    assert "Traceback" not in kernel.stderr and "KeyboardInterrupt" not in kernel.stderr
    assert kernel.returncode == 0
