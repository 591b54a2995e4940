"""Device discovery and choice, without starting the TensorFlow runtime in the calling process.

TensorFlow fixes its logical device layout when its runtime starts, so the calling process (a
notebook kernel, the `gpk` command) only *looks* at physical devices; the worker process of each run
then carves virtual devices out of them before its own runtime starts (`configure_worker_devices`).
`discover_physical_devices` is the single seam tests patch to pretend a machine has 8 GPUs.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...backends import REGISTERED, backend_record, lookup
from ...errors import BackendUnavailable, GpkError, one_sentence, whole_number
from ..processes.child_process import call_in_worker

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_MAX_VIRTUAL_DEVICES = 8  # offered when real devices are missing; enough for 1, 2, 4, 8 runs
DEFAULT_VIRTUAL_GPU_MEMORY_BYTES = 1 << 30  # used when a GPU's memory cannot be read


@dataclass(frozen=True)
class PhysicalDevice:
    """A device as the machine has it, before any virtual split."""

    name: str  # TensorFlow's name, e.g. "/physical_device:GPU:0"
    kind: str  # "cpu" or "gpu"
    index: int  # position among devices of its kind
    description: str = ""  # e.g. "NVIDIA A100-SXM4-40GB"
    memory_bytes: int | None = None  # total memory, when known


@dataclass(frozen=True)
class DevicePlan:
    """Which devices one run uses and how the worker must create them.

    >>> DevicePlan(kind="cpu", count=4, virtual=True, physical_indices=(0,), per_physical=4)
    <DevicePlan 4 virtual cpu device(s) from physical [0], 4 per physical>
    """

    kind: str  # "cpu" or "gpu"
    count: int  # logical devices the run uses
    virtual: bool  # True when count logical devices are carved out of fewer physical ones
    physical_indices: tuple[int, ...]  # physical devices of `kind` made visible to the worker
    per_physical: int = 1  # logical devices created on each visible physical device
    memory_per_logical_bytes: int | None = None  # GPU memory limit of each virtual GPU

    def __post_init__(self) -> None:
        if self.kind not in ("cpu", "gpu"):
            raise ValueError(f"kind={self.kind!r} must be 'cpu' or 'gpu'")
        if self.count < 1:
            raise GpkError(f"devices={self.count} asks for no device; use at least 1")

    def __repr__(self) -> str:
        what = "virtual " if self.virtual else ""
        return (
            f"<DevicePlan {self.count} {what}{self.kind} device(s) from physical "
            f"{list(self.physical_indices)}, {self.per_physical} per physical>"
        )

    @property
    def logical_names(self) -> tuple[str, ...]:
        """The TensorFlow device names the run's strategy is built on."""
        return tuple(f"/{self.kind}:{i}" for i in range(self.count))


def host_cpu() -> PhysicalDevice:
    """This machine's CPU, as every discovery lists it first (whatever the backend)."""
    return PhysicalDevice(
        name="/physical_device:CPU:0", kind="cpu", index=0, description=f"{os.cpu_count()} cores"
    )


def default_backend() -> str:
    """TensorFlow where it is installed, else JAX: what lists the devices when no run says."""
    first = next((record for record in REGISTERED if installed(record.name)), REGISTERED[-1])
    return first.name


def installed(backend: str) -> bool:
    """Whether `backend`'s package ("tensorflow" or "jax") is installed: asked of the import
    system without importing anything, so the caller stays light."""
    record = lookup(backend)
    try:
        return importlib.util.find_spec(record.package if record else backend) is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as none
        return False


def discover_physical_devices(backend: str | None = None) -> tuple[PhysicalDevice, ...]:
    """List this machine's CPU and GPUs as `backend` sees them, asked in a worker process.

    The caller (a notebook kernel, `gpk`) never imports TensorFlow or JAX, let alone starts their
    runtimes: a server imports them once for all runs, and a child of it answers. Cached: the
    hardware does not change while a kernel lives.
    """
    # One discovery at a time per backend: a run arriving while a warming thread lists the
    # devices waits for that answer instead of asking a second child. Each backend has its own
    # lock: a JAX run must not wait for TensorFlow's server to import TensorFlow (seconds on two
    # cores) when both are warming after `%load_ext`.
    backend = backend or default_backend()
    with _discovery_lock(backend):
        return _discover(backend)


_discovery_locks: dict[str, threading.Lock] = {}
_discovery_locks_guard = threading.Lock()


def _discovery_lock(backend: str) -> threading.Lock:
    with _discovery_locks_guard:
        return _discovery_locks.setdefault(backend, threading.Lock())


@functools.lru_cache(maxsize=2)
def _discover(backend: str) -> tuple[PhysicalDevice, ...]:
    entry = backend_record(backend).discovery_entry
    try:
        return call_in_worker(entry, backend=backend)
    except GpkError:
        raise
    except Exception as error:  # noqa: BLE001 - a broken backend is one sentence, not a traceback
        # Not cached (lru_cache keeps no exceptions): a repaired install works at the next call.
        raise BackendUnavailable(_unavailable(backend, error)) from None


def _unavailable(backend: str, error: BaseException) -> str:
    """Why `backend`'s worker could not list the devices, and what to do about it."""
    record = backend_record(backend)
    others = [r.name for r in REGISTERED if r is not record and installed(r.name)]
    alternative = f', or run on backend="{others[0]}"' if others else ""
    return (
        f"{record.display} could not list this machine's devices ({one_sentence(error)}); "
        f'check that python -c "import {backend}" works in this environment{alternative}'
    )


def list_devices(
    max_virtual: int | None = None, backend: str | None = None, cluster: Any = None
) -> pd.DataFrame:
    """One row per device a run can use: the real GPUs, else virtual devices made from the CPU.

    Columns: index, name, kind, description, memory_bytes, virtual, physical. `backend` says who
    looks (TensorFlow where installed, by default; "jax" asks JAX). `cluster=` a
    `gpk.SlurmCluster` (or its allocation) lists each of its nodes' devices, with a `node` column.
    """
    if cluster is not None:
        return cluster.list_devices(max_virtual, backend)
    physical = discover_physical_devices(backend)
    gpus = [d for d in physical if d.kind == "gpu"]
    rows = []
    for d in gpus:
        rows.append(
            dict(
                index=d.index,
                name=f"/gpu:{d.index}",
                kind="gpu",
                description=d.description,
                memory_bytes=d.memory_bytes,
                virtual=False,
                physical=d.name,
            )
        )
    if not gpus:
        cpu = next(d for d in physical if d.kind == "cpu")
        for i in range(max_virtual or virtual_device_limit()):
            rows.append(
                dict(
                    index=i,
                    name=f"/cpu:{i}",
                    kind="cpu",
                    description=f"virtual device on {cpu.description}",
                    memory_bytes=None,
                    virtual=True,
                    physical=cpu.name,
                )
            )
    import pandas as pd  # only here: `gpk` starts its server before pandas is imported

    return pd.DataFrame(
        rows,
        columns=["index", "name", "kind", "description", "memory_bytes", "virtual", "physical"],
    )


def virtual_device_limit() -> int:
    """How many virtual devices the kit offers when real ones are missing (GPK_MAX_VIRTUAL)."""
    raw = os.environ.get("GPK_MAX_VIRTUAL", str(DEFAULT_MAX_VIRTUAL_DEVICES))
    try:
        value = int(raw)
    except ValueError:
        raise GpkError(f"GPK_MAX_VIRTUAL={raw!r} is not a whole number; set it to e.g. 8") from None
    if value < 1:
        raise GpkError(f"GPK_MAX_VIRTUAL={value} offers no device; set it to at least 1")
    return value


def plan_devices(
    devices: int | Sequence[int],
    physical: Sequence[PhysicalDevice] | None = None,
    max_virtual: int | None = None,
    backend: str = "tensorflow",
) -> DevicePlan:
    """Turn a device count or index list into a plan, virtual when real devices are too few.

    Real GPUs are used when there are enough; fewer GPUs than asked are split into virtual GPUs
    with their memory divided evenly (TensorFlow only: JAX cannot split a GPU); with no GPU,
    virtual devices are carved out of the CPU (host devices, on JAX).
    """
    indices = _normalise_devices(devices)
    physical = discover_physical_devices(backend) if physical is None else tuple(physical)
    limit = max_virtual or virtual_device_limit()
    gpus = [d for d in physical if d.kind == "gpu"]
    count = len(indices) if indices is not None else devices
    record = backend_record(backend)
    if not record.splits_gpus and gpus and count > len(gpus):
        splitter = next(r.name for r in REGISTERED if r.splits_gpus)
        raise GpkError(
            f"devices={count} is more than the {len(gpus)} GPU(s) here, and {record.display} "
            f"cannot split a GPU into virtual ones; use devices<={len(gpus)}, or "
            f"backend='{splitter}' for virtual GPUs"
        )
    offered = len(gpus) if gpus and count <= len(gpus) else max(limit, len(gpus))
    if indices is not None:
        _check_indices(indices, offered, gpus)
    if count > offered:
        source = f"{len(gpus)} GPU(s)" if gpus else "the CPU"
        raise GpkError(
            f"devices={count} is more than the {offered} devices this machine offers "
            f"(virtual devices made from {source}); use at most {offered}, or raise the limit "
            f"with GPK_MAX_VIRTUAL"
        )
    if not gpus:
        return DevicePlan(
            kind="cpu", count=count, virtual=count > 1, physical_indices=(0,), per_physical=count
        )
    if count <= len(gpus):
        chosen = tuple(indices) if indices is not None else tuple(range(count))
        return DevicePlan(kind="gpu", count=count, virtual=False, physical_indices=chosen)
    per_physical = -(-count // len(gpus))
    memory = min((g.memory_bytes or DEFAULT_VIRTUAL_GPU_MEMORY_BYTES * per_physical) for g in gpus)
    # Leave a tenth of each GPU to the runtime itself; the rest is split evenly.
    return DevicePlan(
        kind="gpu",
        count=count,
        virtual=True,
        physical_indices=tuple(g.index for g in gpus),
        per_physical=per_physical,
        memory_per_logical_bytes=int(memory * 0.9) // per_physical,
    )


def _normalise_devices(devices: int | Sequence[int]) -> list[int] | None:
    """None for a count; the list for explicit indices; a clear error for anything else."""
    if isinstance(devices, int):  # a bool too, which whole_number refuses
        whole_number(devices, "devices", hint="or indices like [0, 1]")
        return None
    if not isinstance(devices, Sequence) or isinstance(devices, str):
        raise TypeError(f"devices={devices!r} must be a count like 2 or indices like [0, 1]")
    indices = list(devices)
    if not indices:
        raise GpkError("devices=[] names no device; give a count like 2 or indices like [0, 1]")
    for position, index in enumerate(indices):
        whole_number(index, f"devices[{position}]", minimum=None, hint="e.g. devices=[0, 1]")
    if len(set(indices)) != len(indices):
        raise GpkError(f"devices={indices} names a device twice; list each index once")
    return indices


def _check_indices(indices: list[int], offered: int, gpus: list[PhysicalDevice]) -> None:
    bad = [i for i in indices if i < 0 or i >= offered]
    if bad:
        what = "GPUs" if gpus and offered == len(gpus) else "devices (virtual)"
        raise GpkError(
            f"device index {bad[0]} is out of range: this machine offers {offered} {what} "
            f"numbered 0 to {offered - 1}; see gpk.list_devices()"
        )
