"""What dispatched experts' all-to-alls cost, measured standalone in the run's own worker.

Each MoE block sends its experts' buffers over the expert axis and gets them back, forward and
backward: four all-to-alls of the buffer's bytes. They are timed alone on arrays of those sizes,
with the gradients' all-reduce over the data axis, as `comm.py` times tensor's collectives: an
upper bound on what the step exposes, since XLA may overlap them with compute.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ...strategies.fsdp import DATA_AXIS, MODEL_AXIS
from ..measuring.stats import Timing
from .comm import _blocks_of


def all_to_alls(
    devices: Sequence[Any],
    mesh_shape: tuple[int, int],
    all_to_all_bytes: int,
    gradient_bytes: int,
) -> Timing:
    """The step's all-to-alls (`all_to_all_bytes` per device, counted for every block, four
    passes each) over the expert axis, and the gradients summed over the data axis."""
    data, expert = mesh_shape
    mesh = Mesh(np.asarray(devices).reshape(data, expert), (DATA_AXIS, MODEL_AXIS))
    spread = NamedSharding(mesh, P(DATA_AXIS, MODEL_AXIS))
    # all_to_all_bytes counts what leaves each device: (E-1)/E of a block's buffer, four passes
    elements = all_to_all_bytes * expert // (4 * (expert - 1)) // 4
    buffer = max(1, -(-elements // expert)) * expert  # float32, split evenly over the axis
    passes = [
        jax.device_put(jnp.ones((data, expert, buffer), jnp.float32), spread) for _ in range(4)
    ]
    gradients = jax.device_put(
        jnp.ones((data, expert, max(1, gradient_bytes // 4)), jnp.float32), spread
    )

    @jax.jit
    def collectives(passes, gradients):
        def local(passes, gradients):
            moved = [jax.lax.all_to_all(p, MODEL_AXIS, 2, 2, tiled=True) for p in passes]
            summed = jax.lax.psum(gradients, DATA_AXIS) if data > 1 else gradients
            return moved, summed

        inner = P(DATA_AXIS, MODEL_AXIS)
        return jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(inner, inner),
            out_specs=(inner, inner),
            check_vma=False,
        )(passes, gradients)

    return _blocks_of(collectives, (passes, gradients), "standalone_all_to_all_s")
