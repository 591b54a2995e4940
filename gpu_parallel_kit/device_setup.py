"""Create a run's logical devices inside its worker, before the TensorFlow runtime starts.

This is the only place that calls `set_logical_device_configuration`: once the runtime has started
in a process its device layout is fixed, which is why every run gets a fresh worker.
"""

from __future__ import annotations

import os

import tensorflow as tf

from .devices import DevicePlan


def configure_worker_devices(plan: DevicePlan) -> tuple[str, ...]:
    """Make exactly the plan's devices visible and return the names strategies are built on."""
    if plan.kind == "cpu":
        # A CPU plan stays on the CPU even on a GPU machine, so CPU and GPU runs never mix.
        tf.config.set_visible_devices([], "GPU")
        cpu = tf.config.list_physical_devices("CPU")[0]
        if plan.count > 1:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(plan.count)]
            )
    else:
        _configure_gpus(plan)
    _ensure_enough_threads(plan.count)
    return plan.logical_names


def _configure_gpus(plan: DevicePlan) -> None:
    gpus = tf.config.list_physical_devices("GPU")
    visible = [gpus[i] for i in plan.physical_indices]
    tf.config.set_visible_devices(visible, "GPU")
    for gpu in visible:
        if plan.virtual:
            limit_mb = max(1, (plan.memory_per_logical_bytes or 1 << 30) >> 20)
            tf.config.set_logical_device_configuration(
                gpu,
                [
                    tf.config.LogicalDeviceConfiguration(memory_limit=limit_mb)
                    for _ in range(plan.per_physical)
                ],
            )
        else:
            # Growth instead of grabbing all memory makes the peak-memory figure mean something.
            tf.config.experimental.set_memory_growth(gpu, True)


def _ensure_enough_threads(devices: int) -> None:
    """Replicas block on each other inside a step; with fewer inter-op threads than replicas on a
    2-core machine a step can starve, so give each replica a thread."""
    cores = os.cpu_count() or 1
    if devices >= cores:
        tf.config.threading.set_inter_op_parallelism_threads(devices + 1)


def logical_device_names(kind: str) -> list[str]:
    return [d.name for d in tf.config.list_logical_devices(kind.upper())]
