"""Peak memory per device, from the best source each kind of device has."""

from __future__ import annotations

import resource

import tensorflow as tf


def peak_memory(kind: str, device_names: tuple[str, ...]) -> tuple[dict[str, int], str]:
    """Per-device peak bytes and a label saying what the figure is.

    GPUs report their allocator's peak per device. Virtual CPU devices share one process, so each
    gets the worker's peak resident memory: an upper bound, not a per-device split.
    """
    if kind == "gpu":
        peaks = {}
        for name in device_names:
            info = tf.config.experimental.get_memory_info(name.strip("/").upper())
            peaks[name] = int(info.get("peak", 0))
        return peaks, "gpu allocator peak"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return {name: rss for name in device_names}, "process peak rss (shared by all cpu devices)"
