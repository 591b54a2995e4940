"""A run's peak memory per device, and what kind of figure it is, on either backend."""

from __future__ import annotations

import resource
from collections.abc import Iterable
from typing import NamedTuple

GPU_PEAK = "gpu allocator peak"
PROCESS_PEAK = "process peak rss (shared by all cpu devices)"


class PeakMemory(NamedTuple):
    """Peak bytes per device, and what the figure is.

    A GPU's allocator reports its own peak; host devices share one process, so each gets the
    process's peak resident memory: an upper bound, not a per-device split.
    """

    by_device: dict[str, int]  # peak bytes per device name (`/gpu:0`, `/cpu:1`)
    how: str  # what the figure is: `GPU_PEAK` or `PROCESS_PEAK`


def process_peak(device_names: Iterable[str]) -> PeakMemory:
    """The process's peak resident memory, given to every one of its host devices."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return PeakMemory(dict.fromkeys(device_names, rss), PROCESS_PEAK)
