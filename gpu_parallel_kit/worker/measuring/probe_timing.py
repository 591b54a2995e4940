"""How a calibration's probe times what it runs, on either backend: one call's median, and one
repetition's time as the difference of two loops; and the answer a probing child sends.

Each backend hands in `ready`, which waits until a call's work is done (JAX dispatches
asynchronously; TensorFlow's tensors are read back). See `worker/jax/device_probe.py` and
`worker/tensorflow/device_probe.py`.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any, TypeVar

Result = TypeVar("Result")  # what a timed call returns: the backend's arrays or tensors

REPEATS = 3  # timed calls per loop length; the median is kept
TARGET_S = 0.004  # the longer loop of a point lasts about this long
MAX_CALLS = 400  # the most calls `per_call` times to fill its time


def per_call(
    call: Callable[[], Result],
    ready: Callable[[Result], object],
    calls: int = 20,
    at_least_s: float = 0.0,
) -> float:
    """The median time of one call, dispatch and wait included (after one untimed call):
    `calls` calls, and more until they took `at_least_s` in all (at most `MAX_CALLS`), so a
    short call is timed often enough for its median to hold."""
    ready(call())
    times: list[float] = []
    while len(times) < calls or (sum(times) < at_least_s and len(times) < MAX_CALLS):
        start = time.perf_counter()
        ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def per_repetition(
    run: Callable[[int], Result],
    ready: Callable[[Result], object],
    target_s: float = TARGET_S,
    apart: int = 2,
) -> float:
    """One repetition's time: (t(3k) - t(k)) / 2k, k grown until t(3k) reaches `target_s` and
    the two loops are at least `apart` repetitions apart, so neither the call's dispatch nor the
    loop's entry is in it."""
    ready(run(1))  # compiles
    k = 1
    while True:
        long = _timed(run, ready, 3 * k)
        if (long >= target_s and 2 * k >= apart) or k >= 1 << 16:
            break
        k *= max(2, min(16, int(target_s / max(long, 1e-6))))
    short = _timed(run, ready, k)
    return max(long - short, 1e-9) / (2 * k)


def _timed(run: Callable[[int], Result], ready: Callable[[Result], object], k: int) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        ready(run(k))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def probe_answer(
    names: list[str],
    kind: str,
    description: str,
    points: dict[str, Any],
    versions: dict[str, str],
    started: float,
) -> dict[str, Any]:
    """What a probing child sends its caller (`analysis/cost_model/device_calibration.py`
    reads it): its devices, `points` ("matmuls", "elementwise", "call_s", "collectives"), the
    memory each host device holds, the library versions and what probing took."""
    import keras

    return {
        "devices": len(names),
        "device_names": names,
        "device_kind": kind,
        "description": description or host_description(),
        **points,
        "memory_bytes": _host_memory_per_device(len(names)),
        "versions": {**versions, "keras": keras.__version__},
        "probe_s": time.perf_counter() - started,
    }


def host_description() -> str:
    """The processor, as the platform names it."""
    import platform

    return platform.processor() or platform.machine()


def _host_memory_per_device(devices: int) -> float:
    """The host's memory shared out over `devices` (what a CPU's virtual devices hold)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / devices
    except (ValueError, OSError):
        return 0.0
