"""Create a run's logical devices inside its worker, before the TensorFlow runtime starts.

This is the only place that calls `set_logical_device_configuration`: once the runtime has started
in a process its device layout is fixed, which is why every run gets a fresh worker.
"""

from __future__ import annotations

from . import tensorflow_first  # noqa: F401 - TensorFlow before Keras, quietly

# isort: split

import os
import shutil
import subprocess

import tensorflow as tf

from ...runs.description.device_choice import DevicePlan, PhysicalDevice, host_cpu
from .quiet_start import gpus_listed_quietly, gpus_looked_for_quietly


def configure_worker_devices(plan: DevicePlan) -> tuple[str, ...]:
    """Make exactly the plan's devices visible and return the names strategies are built on."""
    with gpus_looked_for_quietly():
        return _configure(plan)


def _configure(plan: DevicePlan) -> tuple[str, ...]:
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


def discover_with_tensorflow() -> tuple[PhysicalDevice, ...]:
    """The discovery itself; `tf.config.list_physical_devices` does not start the runtime."""
    gpus = gpus_listed_quietly()
    memory = _gpu_memory_from_nvidia_smi()
    found = [host_cpu()]
    for i, gpu in enumerate(gpus):
        details = tf.config.experimental.get_device_details(gpu)
        found.append(
            PhysicalDevice(
                name=gpu.name,
                kind="gpu",
                index=i,
                description=str(details.get("device_name", "GPU")),
                memory_bytes=memory[i] if i < len(memory) else None,
            )
        )
    return tuple(found)


def _gpu_memory_from_nvidia_smi() -> list[int]:
    """Total memory per GPU; TensorFlow only reports memory once its runtime has started."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [int(float(line)) << 20 for line in out.split() if line.strip()]
