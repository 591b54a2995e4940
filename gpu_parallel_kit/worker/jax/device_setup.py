"""A JAX run's devices: host devices carved out of the CPU, or the planned GPUs; their memory.

JAX reads its host device count from `XLA_FLAGS` when its runtime starts, on the first
`jax.devices()` call, not at import. The JAX server imports JAX without starting it, so each child
sets the count its run needs here, first. No TensorFlow is imported.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

from ...runs.description.device_choice import DevicePlan, PhysicalDevice, host_cpu
from ...runs.processes.cache_folder import cache_folder
from ..measuring.peak_memory import GPU_PEAK, PeakMemory, process_peak

_HOST_COUNT_FLAG = "--xla_force_host_platform_device_count"
# The persistent compilation cache keeps every program a run compiles, in a folder that lasts: a
# small model's train step takes about 150 KiB, so 1 GiB holds thousands of programs, and the
# folder stops growing there.
JAX_CACHE_MAX_BYTES = 1 << 30
# XLA's GPU backend without its non-deterministic kernels (atomics in scatters and reductions)
# and with autotuning restricted to deterministic choices (JAX's own advice for reproducible GPU
# runs). Read once, when JAX's runtime starts.
DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"
DETERMINISM = {
    "gpu": f"XLA_FLAGS {DETERMINISTIC_FLAG}: XLA's deterministic GPU kernels, no atomics",
    "cpu": (
        f"XLA_FLAGS {DETERMINISTIC_FLAG} set, but it applies to GPUs only: XLA's CPU kernels "
        "have no atomics or autotuning to switch off, so a CPU run repeats bit for bit on the "
        "same devices whether it is set or not"
    ),
}


def host_device_flags(existing: str, count: int) -> str:
    """`XLA_FLAGS` with the host device count set to `count`, the user's other flags kept."""
    kept = [flag for flag in existing.split() if not flag.startswith(_HOST_COUNT_FLAG)]
    return " ".join([*kept, f"{_HOST_COUNT_FLAG}={count}"])


def deterministic_flags(existing: str) -> str:
    """`XLA_FLAGS` with XLA's deterministic GPU ops switched on, the user's other flags kept."""
    return with_flag(existing, DETERMINISTIC_FLAG)


def with_flag(existing: str, flag: str) -> str:
    """`XLA_FLAGS` with `flag` (`--name=value`) set, any other value of it dropped, the user's
    other flags kept."""
    name = flag.partition("=")[0]
    kept = [given for given in existing.split() if given.partition("=")[0] != name]
    return " ".join([*kept, flag])


def set_device_flags(plan: DevicePlan, deterministic: bool = False) -> None:
    """Set the variables JAX reads as its runtime starts, for the plan's devices: before
    anything starts it (`jax.devices()`, or `jax.process_count()` after `jax.distributed`
    joins), or the host keeps one CPU device."""
    if deterministic:
        os.environ["XLA_FLAGS"] = deterministic_flags(os.environ.get("XLA_FLAGS", ""))
    if plan.kind == "cpu":
        os.environ["XLA_FLAGS"] = host_device_flags(os.environ.get("XLA_FLAGS", ""), plan.count)
        os.environ["JAX_PLATFORMS"] = "cpu"  # a CPU plan stays on the CPU, as on TensorFlow
    else:
        # JAX takes 75 % of each GPU up front; allocating as needed makes the peak figure mean
        # something (TensorFlow runs use memory growth for the same reason).
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"


def configure_jax_devices(plan: DevicePlan, deterministic: bool = False) -> list[Any]:
    """Start JAX's runtime with the plan's devices and return them, in mesh order.

    `deterministic`: XLA's deterministic GPU ops (`DETERMINISM` says what that does per kind)."""
    set_device_flags(plan, deterministic)
    _quiet_jax_logging()
    import jax  # noqa: PLC0415 - imported by the server already; this starts nothing

    share_compilations(jax)
    if plan.kind == "cpu":
        devices = jax.devices("cpu")
        if len(devices) < plan.count:
            raise RuntimeError(
                f"JAX offers {len(devices)} host devices, not {plan.count}: its runtime started "
                "before the device count was set"
            )
        return devices[: plan.count]
    gpus = jax.devices("gpu")
    return [gpus[i] for i in plan.physical_indices]


def share_compilations(jax: Any) -> None:
    """Keep XLA's compiled programs on disk between processes (JAX's persistent cache).

    Every run, and every count of a step (`jax/work_count.py`), is a fresh process, so
    without it each one compiles its model's initializers and train step again: about two
    seconds of a small model's run on two cores, and again in a fresh kernel. Processes that
    compile the same programs (the same model on the same devices, with the same flags: JAX's
    key covers all three) load them instead; the cache changes no result. JAX keeps only
    programs that took a second or more to compile by default; here every program is kept, as
    a small model's many short compiles are most of its start. The folder is in the user's
    cache folder (`runs/processes/cache_folder.py`), which a reboot keeps, bounded to
    `JAX_CACHE_MAX_BYTES` (the least recently used programs go first); `GPK_JAX_CACHE` names
    another folder, or "off".
    """
    folder = os.environ.get("GPK_JAX_CACHE") or str(jax_cache_folder())
    if folder == "off":
        return
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    # JAX evicts under a file lock, and refuses a bound where `filelock` is not installed: the
    # cache is then kept unbounded rather than every compile failing.
    if importlib.util.find_spec("filelock") is not None:
        jax.config.update("jax_compilation_cache_max_size", JAX_CACHE_MAX_BYTES)


def jax_cache_folder() -> Path:
    """The persistent compilation cache's default folder, in the user's cache folder."""
    return cache_folder() / "jax_compilations"


def device_names(devices: list[Any]) -> tuple[str, ...]:
    """Names in the kit's form (`/cpu:0`, `/gpu:1`), as TensorFlow rows have them."""
    return tuple(f"/{d.platform}:{d.id}" for d in devices)


def peak_memory(kind: str, devices: list[Any]) -> PeakMemory:
    """Per-device peak bytes and what the figure is: the GPU allocator's peak, or on host devices
    the process's peak resident memory, shared by all of them (an upper bound, not a split)."""
    names = device_names(devices)
    if kind != "gpu":
        return process_peak(names)
    peaks = {}
    for name, device in zip(names, devices, strict=True):
        stats = device.memory_stats() or {}
        peaks[name] = int(stats.get("peak_bytes_in_use", 0))
    return PeakMemory(peaks, GPU_PEAK)


def discover_with_jax() -> tuple[PhysicalDevice, ...]:
    """The machine as JAX sees it: the CPU, and the GPUs when JAX has a CUDA build."""
    _quiet_jax_logging()
    import jax  # noqa: PLC0415

    found = [host_cpu()]
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:  # no GPU backend in this JAX build, or no GPU
        gpus = []
    for i, gpu in enumerate(gpus):
        stats = gpu.memory_stats() or {}
        found.append(
            PhysicalDevice(
                name=f"/physical_device:GPU:{i}",
                kind="gpu",
                index=i,
                description=str(getattr(gpu, "device_kind", "GPU")),
                memory_bytes=stats.get("bytes_limit"),
            )
        )
    return tuple(found)


def _quiet_jax_logging() -> None:
    """JAX warns on every CPU start that no CUDA build is installed; a run on the CPU asked for
    the CPU, so that warning says nothing to the user."""
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.ERROR)
