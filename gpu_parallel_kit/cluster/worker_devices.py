"""Which devices each worker of a multi-worker run uses: plain data, no TensorFlow.

A local run plans `devices` per worker on this machine. With enough real GPUs every worker gets
GPUs of its own (worker i takes GPUs i·n … i·n + n − 1); otherwise the workers share the plan's
devices, and the memory of shared virtual GPUs is divided between the workers as well as between
the virtual GPUs, so together they never ask a GPU for more than it has. A named cluster's hosts
each plan their own devices (`plan_on_this_host`), since the machine that starts the run may have
none of theirs.
"""

from __future__ import annotations

import dataclasses

from ..runs.description.device_choice import DevicePlan, PhysicalDevice, plan_devices


def local_worker_plan(plan: DevicePlan, index: int, workers: int, gpus: int) -> DevicePlan:
    """Worker `index`'s devices in a local run of `workers` workers on a machine with `gpus`.

    >>> plan = DevicePlan(kind="gpu", count=2, virtual=False, physical_indices=(0, 1))
    >>> local_worker_plan(plan, 1, 2, gpus=4).physical_indices
    (2, 3)
    """
    if plan.kind != "gpu" or workers == 1:
        return plan
    own = plan.count * workers <= gpus and plan.physical_indices == tuple(range(plan.count))
    if own and not plan.virtual:
        first = index * plan.count
        return dataclasses.replace(plan, physical_indices=tuple(range(first, first + plan.count)))
    if plan.virtual and plan.memory_per_logical_bytes:
        return dataclasses.replace(
            plan, memory_per_logical_bytes=plan.memory_per_logical_bytes // workers
        )
    return plan


def plan_on_this_host(plan: DevicePlan, physical: tuple[PhysicalDevice, ...]) -> DevicePlan:
    """The same number of devices, planned on the host a cluster worker runs on."""
    return plan_devices(plan.count, physical=physical)
