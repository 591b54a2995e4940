"""Native chatter dropped from a worker's output while it runs, every other line passed on as it
comes.

`worker/quiet_start.py` holds a block's stderr back and writes it out afterwards, which suits an
import. A library that talks at any moment of a run (gloo writes "[Gloo] Rank 0 is connected to
1 peer ranks ..." to stdout whenever a collective first connects its peers) needs a filter for the
process's whole life instead: the file descriptor becomes a pipe, and a thread copies each line to
where the descriptor pointed before, unless it is chatter. Nothing is held back longer than a line.

A worker of a multi-worker run filters its stderr so for its whole life (`native_logs_dropped`):
its native libraries log at any moment (TensorFlow's cuInit failure at its first look for GPUs,
JAX's distributed runtime), straight to the descriptor, past Python's logging.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading

from .quiet_start import CHATTER

CHUNK = 65536

# A line of a native library's log, as absl and glog write it: severity, date, time, thread, file
# and line ("E0000 00:00:1796347186.101349    5608 cuda_platform.cc:52] failed call to cuInit").
# Fatal ones ("F...") are kept: the process aborts right after, and the line says why.
NATIVE_LOG_LINE = re.compile(r"^[IWE]\d{4} \d\d:\d\d:[\d.]+\s+\d+ [^\s\]]+:\d+\] ")
NATIVE_CHATTER = re.compile(f"{NATIVE_LOG_LINE.pattern}|{CHATTER.pattern}")


class LineFilter:
    """Drop lines matching `chatter` from what this process writes to file descriptor `fd`.

    Args:
        fd: the descriptor to filter, 1 for stdout or 2 for stderr.
        chatter: lines to drop; every other line (and a last line without its newline) passes.

    >>> quiet = LineFilter(1, re.compile(r"^\\[Gloo\\] Rank \\d+ is connected"))
    >>> quiet.close()  # before the process ends: the lines still in the pipe are passed on
    """

    def __init__(self, fd: int, chatter: re.Pattern) -> None:
        self.fd = fd
        self.chatter = chatter
        self.target = os.dup(fd)
        reader, writer = os.pipe()
        os.dup2(writer, fd)
        os.close(writer)
        self.reader = reader
        self.thread = threading.Thread(target=self._copy, name="gpk-line-filter", daemon=True)
        self.thread.start()

    def _copy(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self.reader, CHUNK)
            except OSError:
                chunk = b""
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            kept = [line + b"\n" for line in lines if not self._is_chatter(line)]
            if kept:
                self._write(b"".join(kept))
        if pending and not self._is_chatter(pending):
            self._write(pending)

    def _is_chatter(self, line: bytes) -> bool:
        return bool(self.chatter.search(line.decode("utf-8", errors="replace")))

    def _write(self, data: bytes) -> None:
        with contextlib.suppress(OSError):
            while data:
                data = data[os.write(self.target, data) :]

    def close(self, timeout_s: float = 2.0) -> None:
        """Point `fd` back where it pointed and pass on what is still in the pipe."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with contextlib.suppress(OSError):
            os.dup2(self.target, self.fd)  # the pipe's last writer closes: the thread ends
        self.thread.join(timeout_s)
        with contextlib.suppress(OSError):
            os.close(self.reader)


def native_logs_dropped() -> LineFilter | None:
    """Drop native libraries' log lines below fatal (`NATIVE_CHATTER`) from this process's
    stderr, every other line (a Python traceback, a user's print) passed on; `None` where
    TF_CPP_MIN_LOG_LEVEL=0 asks for every native line. Close the filter before the process
    ends."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        return None
    return LineFilter(2, NATIVE_CHATTER)
