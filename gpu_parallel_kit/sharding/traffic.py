"""What the collectives of a layout move per step, in bytes, by textbook counts.

An all-reduce of S bytes over g devices moves 2(g-1)/g * S bytes in and out of each device on a
ring (reduce-scatter, then all-gather); an all-gather or a reduce-scatter alone moves half that.
Tensor parallelism all-reduces activations over the model axis (`Layout.collectives`, per
sample, times the batch each data replica holds); data parallelism all-reduces each device's
gradients over the data axis (a sharded weight's gradient is its shard). A weight placed on the
data axis too (fsdp's, or a model's own layout that puts its `batch` axis on weights) is
gathered where it is used, once for the forward and once for the backward, and its gradient is
reduce-scattered, as ZeRO-3 runs it. These are the bytes the layout implies, not a measurement.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .layout import MODEL, Layout, Placement

ACTIVATION_BYTES = 4  # float32 activations
DATA = "batch"  # the mesh's data axis, as keras.distribution names it


def ring_all_reduce_bytes(size: int, devices: int) -> int:
    """Bytes each device moves in a ring all-reduce of `size` bytes over `devices`."""
    return 0 if devices <= 1 else int(2 * (devices - 1) / devices * size)


def full_bytes(p: Placement) -> int:
    """Bytes of the whole weight."""
    total = p.itemsize
    for size in p.shape:
        total *= size
    return total


def gathered_bytes(p: Placement, model: int) -> int:
    """Bytes of `p` a device holds once the data axis has gathered it (its model-axis shard)."""
    return full_bytes(p) // (model if MODEL in p.axes else 1)


@dataclass(frozen=True)
class Traffic:
    """Per step, per device."""

    activation_bytes: int  # summed by the model-axis all-reduces (forward and backward)
    gradient_bytes: int  # replicated weights' gradients, all-reduced over the data axis
    collectives: int  # collectives per step
    traffic_bytes_per_device: int  # moved in and out of each device, ring counts
    all_gather_bytes: int = 0  # weights on the data axis, gathered for forward and backward
    reduce_scatter_bytes: int = 0  # their gradients, reduce-scattered over the data axis
    context_bytes: int = 0  # keys and values gathered over the context axis, their grads scattered

    @property
    def reduced_bytes(self) -> int:
        """The bytes the step's collectives handle: the row's `comm_bytes`."""
        return (
            self.activation_bytes
            + self.gradient_bytes
            + self.all_gather_bytes
            + self.reduce_scatter_bytes
            + self.context_bytes
        )


def with_context(traffic: Traffic, key_value_bytes: list[int], context: int) -> Traffic:
    """`traffic` and a context axis of `context` devices: each block's keys and values (of
    `key_value_bytes[b]` bytes for the whole sequence of the samples a replica holds) gathered
    over it in the forward, as Llama 3 gathers them, and their gradients reduce-scattered in the
    backward; each moves (c-1)/c of them per device."""
    if context <= 1:
        return traffic
    total = sum(key_value_bytes)
    return dataclasses.replace(
        traffic,
        collectives=traffic.collectives + 2 * len(key_value_bytes),
        traffic_bytes_per_device=traffic.traffic_bytes_per_device
        + 2 * (context - 1) * total // context,
        context_bytes=2 * total,
    )


def tensor_traffic(layout: Layout, data: int, global_batch: int) -> Traffic:
    """A (data, model) mesh: activations over the model axis; each weight on the data axis
    gathered twice and its gradient reduce-scattered, each other weight's gradient (its
    model-axis shard) all-reduced over the data axis. A gather or a reduce-scatter of S bytes
    over D devices moves (D-1)/D·S per device, an all-reduce twice that."""
    trainable = [p for p in layout.placements if p.trainable]
    on_data = (
        [gathered_bytes(p, layout.model) for p in trainable if DATA in p.axes] if data > 1 else []
    )
    replicated = [
        gathered_bytes(p, layout.model) for p in trainable if DATA not in p.axes or data <= 1
    ]
    gradients = sum(replicated) if data > 1 else 0
    local_batch = global_batch // max(data, 1)
    activations = [
        c.elements_per_sample * local_batch * ACTIVATION_BYTES for c in layout.collectives
    ]
    moved = (
        3 * sum((data - 1) * s // data for s in on_data)
        + ring_all_reduce_bytes(gradients, data)
        + sum(ring_all_reduce_bytes(a, layout.model) for a in activations)
    )
    count = 3 * len(on_data) + (len(replicated) if gradients else 0) + len(activations)
    return Traffic(
        activation_bytes=sum(activations),
        gradient_bytes=gradients,
        collectives=count,
        traffic_bytes_per_device=moved,
        all_gather_bytes=2 * sum(on_data),
        reduce_scatter_bytes=sum(on_data),
    )


def data_traffic(gradient_bytes: int, devices: int, variables: int) -> Traffic:
    """Data parallelism over a 1-D mesh: every gradient all-reduced over every device."""
    moved = gradient_bytes if devices > 1 else 0
    return Traffic(0, moved, variables if devices > 1 else 0, ring_all_reduce_bytes(moved, devices))
