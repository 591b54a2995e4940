"""A GPU cluster of two levels: nodes of GPUs joined by a link inside, and a network between.

Ranks fill a node before the next one. In a plan, tensor ranks are innermost, then pipeline
stages, then data replicas (Megatron-LM's order), so a tensor group stays inside a node whenever
it fits there. A collective or a send runs on the slowest link its group crosses.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ...errors import GpkError, whole_number
from ...strategies.plan_axes import DATA, PLAN_AXES
from .hardware_presets import USUAL_DEVICE, Device, Interconnect, interconnect
from .hardware_presets import device as device_preset
from .software_stack import SoftwareStack, software_stack

if TYPE_CHECKING:
    from ...runs.results.run_result import RunResult
    from .projected_rows import ProjectionOptions


@dataclass(frozen=True, init=False)
class GPUCluster:
    """Nodes of `per_node` GPUs each, `inside` joining the GPUs of a node and `between` the nodes.

    Args:
        device: the GPU, a preset ("a100", "h100", "h200"), a dict as `project()` takes, or a
            `gpk.DeviceCalibration` of the devices at hand (its link is then `inside`'s
            default).
        nodes: how many nodes.
        per_node: GPUs in each node.
        inside: the link between GPUs of one node: a preset or a dict; default, the GPU's
            usual NVLink (nvlink3 for the A100, nvlink4 for the H100 and H200).
        between: each GPU's share of its node's network: a preset or a dict.
        stack: the training software its steps are timed under
            (`software_stack.SoftwareStack`, or a name the kit holds); default a calibration's
            own where `device` is one, else the newest stack the kit holds.

    Example: `GPUCluster(device="a100", nodes=16, per_node=8, inside="nvlink3",
    between="net400g", stack="megatron-lm-2022")`.
    """

    device: Device
    nodes: int
    per_node: int
    inside: Interconnect
    between: Interconnect
    stack: SoftwareStack

    def __init__(
        self,
        device: str | Mapping[str, Any] | Device = "h100",
        nodes: int = 1,
        per_node: int = 8,
        inside: str | Mapping[str, Any] | Interconnect | None = None,
        between: str | Mapping[str, Any] | Interconnect = "net400g",
        stack: str | SoftwareStack | None = None,
    ) -> None:
        gpu = device_preset(device)
        if stack is None and hasattr(device, "as_stack"):  # a calibration: its own stack
            stack = device.as_stack()
        if inside is None and hasattr(device, "as_link"):  # a calibration: its own link
            inside = device.as_link()
        usual = next((link for link, name in USUAL_DEVICE.items() if name == gpu.name), None)
        if inside is None and usual is None:
            raise GpkError(
                f"device {gpu.name!r} has no usual link inside a node; give inside= as a preset "
                "such as 'nvlink4' or a dict"
            )
        object.__setattr__(self, "device", gpu)
        object.__setattr__(self, "nodes", whole_number(nodes, "nodes"))
        object.__setattr__(self, "per_node", whole_number(per_node, "per_node"))
        object.__setattr__(self, "inside", interconnect(inside if inside is not None else usual))
        object.__setattr__(self, "between", interconnect(between))
        object.__setattr__(self, "stack", software_stack(stack))

    def __hash__(self) -> int:
        # A search asks cached figures of one cluster for every plan: its hash, worked out once.
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.device, self.nodes, self.per_node, self.inside, self.between, self.stack))

    @property
    def gpus(self) -> int:
        """Every GPU of the cluster."""
        return self.nodes * self.per_node

    @property
    def label(self) -> str:
        """ "16x8 a100, nvlink3 inside, net400g between, under nemo-24.12": how tables and
        titles name it, the software stack its steps are timed under last."""
        return (
            f"{self.nodes}x{self.per_node} {self.device.name}, {self.inside.name} inside, "
            f"{self.between.name} between, under {self.stack.name}"
        )

    def link_for(self, devices: int) -> Interconnect:
        """The link a collective over the first `devices` GPUs crosses: `inside` while they fit
        in one node, else `between`."""
        self.check_devices(devices)
        return self.inside if devices <= self.per_node else self.between

    def check_devices(self, devices: int) -> None:
        whole_number(devices, "devices")
        if devices > self.gpus:
            raise GpkError(
                f"devices={devices} is more than the cluster's {self.gpus} GPUs "
                f"({self.nodes} nodes of {self.per_node}); use at most {self.gpus}"
            )

    def first(self, devices: int) -> GPUCluster:
        """The cluster of its first `devices` GPUs (ranks fill a node before the next): a run
        on fewer GPUs than the cluster has is placed there."""
        self.check_devices(devices)
        if devices != self.gpus and devices > self.per_node and devices % self.per_node:
            raise GpkError(
                f"devices={devices} fills no whole node of {self.per_node} GPUs; project onto "
                f"a multiple of {self.per_node}, or at most {self.per_node}"
            )
        per_node = min(devices, self.per_node)
        return GPUCluster(
            self.device, devices // per_node, per_node, self.inside, self.between, self.stack
        )

    def links(self, data: int, tensor: int, stages: int) -> dict[str, Interconnect | None]:
        """Each axis of a data × tensor × stages plan and the link its groups cross (None for an
        axis of one): tensor groups, the sends between neighbouring stages, data rings."""
        sizes = dict(zip(PLAN_AXES, (tensor, stages, data), strict=True))
        for axis, size in sizes.items():
            whole_number(size, axis)
        if data * tensor * stages != self.gpus:
            raise GpkError(
                f"data={data} × tensor={tensor} × stages={stages} is {data * tensor * stages} "
                f"GPUs, not the cluster's {self.gpus}; choose sizes whose product is {self.gpus}"
            )
        found: dict[str, Interconnect | None] = {}
        stride = 1
        for axis in PLAN_AXES:
            size = sizes[axis]
            if size == 1:
                found[axis] = None
            elif not _crosses_nodes(self.gpus, self.per_node, stride, size):
                found[axis] = self.inside
            elif axis == DATA:  # a step's few large collectives, spread over the node's links
                found[axis] = self.spread_link(min(size, max(1, self.per_node // stride)))
            else:  # a cut's sends, or a tensor group's per-layer collectives: one GPU's link
                found[axis] = self.between
            stride *= size
        return found

    def spread_link(self, local: int) -> Interconnect:
        """The link a collective crosses whose group spans nodes with `local` of its GPUs on
        each: NCCL runs a ring per GPU of a node, each leaving the node through that GPU's own
        network link and carrying 1/`local` of the bytes, so the network is `local` times as
        wide for it, up to the node's own links."""
        if local <= 1:
            return self.between
        wide = min(self.between.bandwidth_bytes_s * local, self.inside.bandwidth_bytes_s)
        return Interconnect(
            f"{self.between.name} ×{local}",
            wide,
            self.between.latency_s,
            f"{self.between.source}; {local} GPUs of each node in the group, a ring each",
        )


def _crosses_nodes(ranks: int, per_node: int, stride: int, size: int) -> bool:
    """Whether a group of `size` ranks `stride` apart spans two nodes. Ranks fill nodes in
    order, so a group spans two exactly when its first and last members do."""
    block = stride * size
    return any(
        (start + offset) // per_node != (start + offset + (size - 1) * stride) // per_node
        for start in range(0, ranks, block)
        for offset in range(stride)
    )


def project_onto_cluster(
    results: Sequence[RunResult],
    cluster: GPUCluster,
    devices: Sequence[int],
    options: ProjectionOptions | None = None,
) -> list[RunResult]:
    """Projected rows of `results` on `cluster`'s GPUs: device counts that fit in one node on
    its `inside` link, larger ones on `between`, all under one label, so their speedups share
    one projected single device. `options` are `project_results`'s; the device projected onto
    is the cluster's unless they name one."""
    from .projected_rows import ProjectionOptions, project_results

    options = options or ProjectionOptions()
    groups: dict[Interconnect, list[int]] = {}
    for count in devices:
        groups.setdefault(cluster.link_for(count), []).append(count)
    label = options.label or f"{cluster.inside.name}/{cluster.between.name}+{cluster.device.name}"
    device = cluster.device if options.device is None else options.device
    on_cluster = replace(options, device=device, label=label, cluster=cluster)
    rows: dict[str, RunResult] = {}
    for link, counts in groups.items():
        on_link = project_results(results, link, counts, on_cluster)
        for row in on_link:
            rows.setdefault(row.run_id, row)  # the projected single device, once
    return list(rows.values())
