"""Peak memory per device, from the best source each kind of device has."""

from __future__ import annotations

import tensorflow as tf

from ..measuring.peak_memory import GPU_PEAK, PeakMemory, process_peak


def peak_memory(kind: str, device_names: tuple[str, ...]) -> PeakMemory:
    """Per-device peak bytes and a label saying what the figure is.

    GPUs report their allocator's peak per device. Virtual CPU devices share one process, so each
    gets the worker's peak resident memory: an upper bound, not a per-device split.
    """
    if kind != "gpu":
        return process_peak(device_names)
    peaks = {}
    for name in device_names:
        info = tf.config.experimental.get_memory_info(name.strip("/").upper())
        peaks[name] = int(info.get("peak", 0))
    return PeakMemory(peaks, GPU_PEAK)
