"""What the collectives of a layout move per step, in bytes, by textbook counts.

An all-reduce of S bytes over g devices moves 2(g-1)/g * S bytes in and out of each device on a
ring (reduce-scatter, then all-gather). Tensor parallelism all-reduces activations over the model
axis (`Layout.collectives`, per sample, times the batch each data replica holds); data
parallelism all-reduces each device's gradients over the data axis (a sharded weight's gradient
is its shard). These are the bytes the layout implies, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import Layout

ACTIVATION_BYTES = 4  # float32 activations


def ring_all_reduce_bytes(size: int, devices: int) -> int:
    """Bytes each device moves in a ring all-reduce of `size` bytes over `devices`."""
    return 0 if devices <= 1 else int(2 * (devices - 1) / devices * size)


@dataclass(frozen=True)
class Traffic:
    """Per step, per device."""

    activation_bytes: int  # summed by the model-axis all-reduces (forward and backward)
    gradient_bytes: int  # summed by the data-axis all-reduces
    collectives: int  # all-reduces per step
    traffic_bytes_per_device: int  # moved in and out of each device, ring counts

    @property
    def reduced_bytes(self) -> int:
        return self.activation_bytes + self.gradient_bytes


def tensor_traffic(layout: Layout, data: int, global_batch: int) -> Traffic:
    """A (data, model) mesh: activations over the model axis, gradient shards over the data one."""
    local_batch = global_batch // max(data, 1)
    activations = sum(
        c.elements_per_sample * local_batch * ACTIVATION_BYTES for c in layout.collectives
    )
    gradients = sum(p.bytes_per_device(layout.model) for p in layout.placements if p.trainable)
    gradients = gradients if data > 1 else 0
    per_device = sum(
        ring_all_reduce_bytes(c.elements_per_sample * local_batch * ACTIVATION_BYTES, layout.model)
        for c in layout.collectives
    ) + ring_all_reduce_bytes(gradients, data)
    count = len(layout.collectives) + (
        sum(1 for p in layout.placements if p.trainable) if data > 1 else 0
    )
    return Traffic(activations, gradients, count, per_device)


def data_traffic(gradient_bytes: int, devices: int, variables: int) -> Traffic:
    """Data parallelism over a 1-D mesh: every gradient all-reduced over every device."""
    moved = gradient_bytes if devices > 1 else 0
    return Traffic(0, moved, variables if devices > 1 else 0, ring_all_reduce_bytes(moved, devices))
