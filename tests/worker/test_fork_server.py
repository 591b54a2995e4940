"""The fork server's preload ends its server without teardown, and nothing else's exit."""

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_importing_the_preload_outside_the_fork_server_keeps_the_exit_status():
    # A test run or a documentation build that imported it must still fail with its own status.
    code = (
        "import sys\n"
        "from gpu_parallel_kit.worker.tensorflow import fork_server\n"
        "assert not fork_server.in_fork_server()\n"
        "sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=os.environ)
    assert done.returncode == 3, done.stderr.decode()[-2000:]
