"""A worker's stderr filtered for its whole life: native log lines below fatal dropped, every
other line passed on."""

import os
import subprocess
import sys

import pytest

from gpu_parallel_kit.worker.line_filter import NATIVE_CHATTER, native_logs_dropped

CUINIT = (
    "E0000 00:00:1796347186.101349    5608 cuda_platform.cc:52] failed call to cuInit: "
    "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
)
XLA = "W0312 09:15:02.123456   41 external/local_xla/xla/service/service.cc:163] a warning"
FATAL = "F0000 00:00:1796347186.101349    5608 session.cc:12] Check failed: ok"


@pytest.mark.parametrize("line", [CUINIT, XLA, "I0000 00:00:17.5 1 port.cc:153] info"])
def test_native_log_lines_below_fatal_are_chatter(line):
    assert NATIVE_CHATTER.search(line)


@pytest.mark.parametrize(
    "line", [FATAL, "RuntimeError: the builder broke", "E0000 something about the user's run"]
)
def test_fatal_lines_and_python_output_are_kept(line):
    assert not NATIVE_CHATTER.search(line)


def test_the_filter_drops_native_lines_at_the_descriptor():
    code = (
        "import os\n"
        "from gpu_parallel_kit.worker.line_filter import native_logs_dropped\n"
        "quiet = native_logs_dropped()\n"
        f"os.write(2, {CUINIT + chr(10)!r}.encode())\n"
        "os.write(2, b'kept line\\n')\n"
        "quiet.close()\n"
        "os.write(2, b'after\\n')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stderr == "kept line\nafter\n"


def test_every_native_line_is_kept_where_all_were_asked_for(monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    assert native_logs_dropped() is None
