"""Every parallel plan of a Transformer on a GPU cluster as a row, sized and timed, and ranked:
those that fit first, each group fastest first."""

from __future__ import annotations

from ...errors import GpkError
from .gpu_cluster import GPUCluster
from .matmul_efficiency import MatmulEfficiency
from .model_card import ModelCard
from .parallel_plan import plans
from .parallel_plan_memory import RESERVE, memory
from .parallel_plan_step_time import step_time
from .roofline import Efficiency
from .software_stack import SoftwareStack


def rank(
    card: ModelCard,
    cluster: GPUCluster,
    global_batch: int,
    reserve: float = RESERVE,
    efficiency: Efficiency | MatmulEfficiency | SoftwareStack | None = None,
    attention: str | None = None,
) -> list[dict[str, float | int | str | bool]]:
    """Every plan as a row (`Plan`'s fields, `memory`, `step_time`, `memory_bytes`, `fits`),
    those that fit first, each group fastest first (of two as fast, the leaner first).

    Args:
        card: the model's counted figures.
        cluster: the GPUs every plan uses, all of them.
        global_batch: samples per step, over the whole cluster.
        reserve: the share of each GPU's memory kept free for the framework.
        efficiency: the software stack the steps run under (None: the cluster's,
            `GPUCluster.stack`: each plan its own band by its matmuls' shapes), or a band.
        attention: "flash" or "as-written"; None: "flash" where the GPU has a fused kernel.
    """
    if not 0 <= reserve < 1:
        raise GpkError(f"reserve={reserve} must lie in [0, 1); e.g. 0.1 keeps a tenth free")
    room = cluster.device.memory_bytes * (1 - reserve)
    rows = []
    for plan in plans(card, cluster, global_batch, attention):
        held = memory(card, plan)
        # vars, not asdict: asdict deep-copies each plan's tuple of stage blocks.
        timed = step_time(card, plan, cluster, efficiency).columns()
        total = held.total
        rows.append(
            {**vars(plan), **timed, **held.columns(), "memory_bytes": total, "fits": total <= room}
        )
    if not rows:
        raise GpkError(
            f"no data × tensor × stages plan splits {card.layers} blocks, {card.heads} heads "
            f"and a global batch of {global_batch} over {cluster.gpus} GPUs; use a global batch "
            f"that is a multiple of {cluster.gpus}"
        )
    rows.sort(key=lambda r: (not r["fits"], r["step_time_s"], r["memory_bytes"]))
    return rows
