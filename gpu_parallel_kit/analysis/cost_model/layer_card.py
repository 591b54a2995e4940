"""A model's card made of its own layers, and its plans on a GPU cluster: data, ZeRO and fsdp
over the data axis, and pipeline stages cut by counted cost.

For a model without the Transformer blocks `model_card.py` reads (an MLP, a CNN, a
keras.applications model), each layer the count names is a row: its forward and backward FLOPs,
the bytes it moves and its parameters per sample, as the compiler counted them
(`counted_work.LayerWork`), and the activations it keeps for the backward. Runs of rows that
repeat the same kinds are found as blocks. A pipeline's stages are contiguous cuts of the rows,
balanced on their FLOPs (`pipeline/partition.solve`); each plan's step is the roofline's
(`roofline.py`: the counted work at the efficiency band, the launch floor), the stage's share
of it, the gradients' all-reduce on the data axis's link and a pipeline's bubble and sends.
No layer is split over devices here: tensor plans are the Transformer card's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from ...errors import GpkError, whole_number
from ...pipeline.partition import solve
from ...pipeline.schedules import ONE_F_ONE_B
from ...pipeline.simulation import theoretical_bubble
from .counted_work import WorkCount
from .gpu_cluster import GPUCluster
from .roofline import ACTIVATION_WIDTH, DEFAULT_EFFICIENCY, LAUNCH_S, Efficiency, fusion
from .step_time_model import ring_all_reduce_s
from .training_precision import (
    SHARDED_BY_DATA,
    StateBytes,
    model_state_bytes,
    state_bytes,
    training_precision,
)

SHARDINGS = tuple(SHARDED_BY_DATA)
NO_PIPELINE = "-"
PARTS = ("compute", "comm:data", "comm:stages", "bubble")
# The backward of a layer with weights costs about twice its forward (the input's and the
# weights' gradients); the step's own count says the total, the layers' rows its split.
STEP_PER_FORWARD = 3.0


@dataclass(frozen=True)
class LayerRow:
    """One layer of the model as a pipeline sees it, per sample.

    Args:
        name: the Keras layer's name.
        kind: its class, e.g. "Conv2D".
        flops: forward and backward FLOPs of one sample.
        bytes: the bytes its forward moves for one sample, as counted.
        parameters: its trainable elements.
        kept_bytes: what backpropagation keeps of it for one sample.
    """

    name: str
    kind: str
    flops: float
    bytes: float
    parameters: int
    kept_bytes: float


@dataclass(frozen=True)
class LayerBlock:
    """A run of layers repeating the same kinds: `repeats` copies of `kinds` from `first`."""

    first: int
    kinds: tuple[str, ...]
    repeats: int


@dataclass(frozen=True)
class LayerCard:
    """A model's counted step, layer by layer.

    Args:
        name: the model's name.
        rows: its layers in call order (`layer_rows`).
        work: the whole step's count, the roofline's input.
        precision: the training precision ("bf16", "fp32", ...).
        optimizer: the optimizer's name or its bytes of state per parameter.
    """

    name: str
    rows: tuple[LayerRow, ...]
    work: WorkCount
    precision: str = "bf16"
    optimizer: str | float = "adam"

    def __post_init__(self) -> None:
        state_bytes(self.optimizer, self.precision)
        if not self.rows:
            raise GpkError(f"{self.name}'s count names no layer; a card needs at least one")

    def __repr__(self) -> str:
        return (
            f"<LayerCard {self.name}: {len(self.rows)} layers, {self.parameters:,} parameters, "
            f"{self.work.flops_per_sample / 1e9:.4g} GFLOP per sample>"
        )

    @functools.cached_property
    def state(self) -> StateBytes:
        """Bytes per parameter of each model state."""
        return state_bytes(self.optimizer, self.precision)

    @property
    def parameters(self) -> int:
        """Trainable elements: the count's, else the rows'."""
        return self.work.parameters or sum(row.parameters for row in self.rows)

    def blocks(self) -> tuple[LayerBlock, ...]:
        """Runs of at least two consecutive copies of the same sequence of kinds (the longest
        pattern first), as `find_blocks` finds them in the rows' kinds."""
        return find_blocks(tuple(row.kind for row in self.rows))

    def stage_sizes(self, stages: int) -> tuple[int, ...]:
        """Layers per stage of the contiguous cut whose costliest stage has the fewest FLOPs."""
        return _stage_sizes(tuple(row.flops for row in self.rows), stages)

    def table(self) -> list[dict[str, float | int | str]]:
        """The rows as plain data, one dict per layer."""
        return [asdict(row) for row in self.rows]


def layer_rows(
    work: WorkCount, kept: dict[str, float] | None = None, activation_width: float = 1.0
) -> tuple[LayerRow, ...]:
    """The rows of a count's layers: their forward FLOPs scaled so that the rows sum to the
    step's FLOPs per sample, and the activations each keeps. Those come from `kept` (bytes by
    layer name, a traced count's residuals) when it names any of the layers, a layer it does
    not name keeping nothing (its output is kept under the next layer's name); else each
    layer's output: half its forward bytes per sample (it reads its input and writes its
    output; its weights are read once a step, not per sample), times `activation_width`, the
    training's activation bytes over the count's (0.5 for 16-bit activations counted at 32
    bits, `roofline.ACTIVATION_WIDTH`)."""
    if not work.layers:
        raise GpkError(f"the count from {work.source} names no layer; count it with its layers")
    forward = math.fsum(layer.forward_flops for layer in work.layers)
    scale = work.flops_per_sample / forward if forward > 0 else STEP_PER_FORWARD
    kept = kept or {}
    traced = any(layer.name in kept for layer in work.layers)
    return tuple(
        LayerRow(
            name=layer.name,
            kind=layer.kind,
            flops=layer.forward_flops * scale,
            bytes=layer.forward_bytes,
            parameters=layer.parameters,
            kept_bytes=float(
                kept.get(layer.name, 0.0) if traced else layer.forward_bytes / 2 * activation_width
            ),
        )
        for layer in work.layers
    )


def find_blocks(kinds: tuple[str, ...], longest: int = 16) -> tuple[LayerBlock, ...]:
    """Runs of two or more consecutive copies of one pattern of kinds, left to right, each the
    pattern that covers the most layers where it starts (a longer one first on a tie)."""
    found: list[LayerBlock] = []
    start = 0
    while start < len(kinds):
        best: LayerBlock | None = None
        for size in range(1, min(longest, (len(kinds) - start) // 2) + 1):
            pattern = kinds[start : start + size]
            repeats = 1
            while kinds[start + repeats * size : start + (repeats + 1) * size] == pattern:
                repeats += 1
            if repeats > 1 and (best is None or repeats * size >= best.repeats * len(best.kinds)):
                best = LayerBlock(start, pattern, repeats)
        if best is None:
            start += 1
            continue
        found.append(best)
        start += best.repeats * len(best.kinds)
    return tuple(found)


@functools.lru_cache(maxsize=256)
def _stage_sizes(flops: tuple[float, ...], stages: int) -> tuple[int, ...]:
    # a layer without FLOPs (a reshape, a pooling) still takes a little: a cut may not be empty
    floor = max(flops) * 1e-6 if any(flops) else 1.0
    return tuple(solve([max(f, floor) for f in flops], stages))


@dataclass(frozen=True)
class LayerPlan:
    """One way to train a layer card: the data and pipeline axes, the sharding, the
    micro-batches and the pipeline's cut (layers per stage)."""

    data: int
    stages: int
    sharding: str
    micro_batch_size: int
    micro_batches: int
    schedule: str
    stage_sizes: tuple[int, ...]


def layer_plans(card: LayerCard, cluster: GPUCluster, global_batch: int) -> Iterator[LayerPlan]:
    """Every plan of `card` on all of `cluster`'s GPUs at `global_batch` samples a step."""
    whole_number(global_batch, "global_batch")
    gpus = cluster.gpus
    for stages in (s for s in range(1, gpus + 1) if gpus % s == 0 and s <= len(card.rows)):
        data = gpus // stages
        if global_batch % data:
            continue
        sizes = card.stage_sizes(stages)
        replica = global_batch // data
        for size in (s for s in range(1, replica + 1) if replica % s == 0 and s & (s - 1) == 0):
            micro_batches = replica // size
            shardings = SHARDINGS if stages == 1 else SHARDINGS[:2]
            for sharding in shardings:
                yield LayerPlan(
                    data=data,
                    stages=stages,
                    sharding=sharding,
                    micro_batch_size=size,
                    micro_batches=micro_batches,
                    schedule=NO_PIPELINE if stages == 1 else ONE_F_ONE_B.name,
                    stage_sizes=sizes,
                )


def layer_memory(card: LayerCard, plan: LayerPlan) -> dict[str, float]:
    """Bytes on the fullest device: its stage's model states under the plan's sharding, and the
    kept activations of the micro-batches its first stage holds in flight."""
    found: dict[str, float] = {}
    for rows in _stages(card, plan):
        parameters = sum(row.parameters for row in rows)
        states = model_state_bytes(parameters, card.state, plan.data, 1, 1, plan.sharding)
        in_flight = 1 if plan.stages == 1 else min(plan.stages, plan.micro_batches)
        kept = math.fsum(row.kept_bytes for row in rows) * plan.micro_batch_size * in_flight
        parts = {**states, "activations_bytes": kept}
        if sum(parts.values()) > sum(found.values()):
            found = parts
    return found


def layer_step_time(
    card: LayerCard,
    plan: LayerPlan,
    cluster: GPUCluster,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> dict[str, float | str]:
    """The step's seconds at the band's likely, low and high ends, its parts and what bounds it:
    the busiest stage's share of the counted roofline for its micro-batches, the gradients'
    ring all-reduce on the data axis's link (hidden behind two thirds of the compute, not
    under fsdp, which also gathers: 1.5 times the bytes), and a pipeline's bubble and sends."""
    links = cluster.links(data=plan.data, tensor=1, stages=plan.stages)
    device = cluster.device
    work = card.work
    samples = plan.micro_batch_size * plan.micro_batches
    stages = _stages(card, plan)
    total_flops = math.fsum(row.flops for row in card.rows)
    share = max(math.fsum(row.flops for row in rows) for rows in stages) / total_flops
    widest = max(stages, key=lambda rows: sum(row.parameters for row in rows))
    parameters = sum(row.parameters for row in widest)
    flops = work.flops(samples) * share
    peak = training_precision(card.precision).peak
    width = ACTIVATION_WIDTH[peak]
    moved = fusion(work) * (width * work.bytes_per_sample * samples + work.bytes_per_step) * share
    flops_s = flops / device.peak_flops(peak)
    bytes_s = moved / device.memory_bandwidth_bytes_s
    floor = work.kernels * share * plan.micro_batches * LAUNCH_S
    grads = parameters * card.state.grads
    data_s = ring_all_reduce_s(grads, plan.data, links["data"]) if links["data"] else 0.0
    data_s *= 1.5 if plan.sharding == "fsdp" else 1.0
    bubble = theoretical_bubble(ONE_F_ONE_B.name, plan.stages, plan.micro_batches, 1)
    sends = 0.0
    if links["stages"] is not None:
        cut = max(rows[-1].kept_bytes for rows in stages[:-1]) * plan.micro_batch_size
        sends = 2 * (plan.stages - 1) * links["stages"].send_s(cut)
    found, parts = {}, {}
    for end in ("likely", "low", "high"):
        compute = max(max(flops_s, bytes_s) / efficiency.at(end), floor)
        idle = compute * bubble / (1 - bubble)
        exposed = data_s if plan.sharding == "fsdp" else max(0.0, data_s - 2 / 3 * compute)
        found[end] = compute + idle + exposed + sends
        if end == "likely":
            parts = {"compute": compute, "comm:data": exposed, "comm:stages": sends,
                     "bubble": idle}  # fmt: skip
    likely = efficiency.at("likely")
    terms = {"flops": flops_s / likely, "memory-bandwidth": bytes_s / likely, "launches": floor}
    largest = max(parts, key=parts.__getitem__)
    bound = largest
    if largest == "compute":
        bound = {"flops": "compute", "memory-bandwidth": "memory-bandwidth",
                 "launches": "launches"}[max(terms, key=terms.__getitem__)]  # fmt: skip
    return {
        "step_time_s": found["likely"],
        "step_time_low_s": found["high"],
        "step_time_high_s": found["low"],
        "throughput_samples_s": plan.data * samples / found["likely"],
        **{f"{name}_s": seconds for name, seconds in parts.items()},
        **{f"{name}_s": seconds for name, seconds in terms.items()},
        "bound": bound,
    }


def rank_layers(
    card: LayerCard,
    cluster: GPUCluster,
    global_batch: int,
    reserve: float = 0.1,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
) -> list[dict[str, float | int | str | bool | tuple]]:
    """Every plan of a layer card as a row (`LayerPlan`'s fields, `layer_step_time`,
    `layer_memory`, `memory_bytes`, `fits`), those that fit first, each group fastest first
    (of two as fast, the leaner first).

    Args:
        card: the model's layers, counted.
        cluster: the GPUs every plan uses, all of them.
        global_batch: samples per step, over the whole cluster.
        reserve: the share of each GPU's memory kept free for the framework.
        efficiency: the share of the roofline a step reaches, as a band.
    """
    if not 0 <= reserve < 1:
        raise GpkError(f"reserve={reserve} must lie in [0, 1); e.g. 0.1 keeps a tenth free")
    room = cluster.device.memory_bytes * (1 - reserve)
    rows = []
    for plan in layer_plans(card, cluster, global_batch):
        parts = layer_memory(card, plan)
        total = sum(parts.values())
        row = {**asdict(plan), **layer_step_time(card, plan, cluster, efficiency), **parts}
        rows.append({**row, "memory_bytes": total, "fits": total <= room})
    if not rows:
        raise GpkError(
            f"no data × stages plan divides a global batch of {global_batch} over "
            f"{cluster.gpus} GPUs; use a global batch that is a multiple of {cluster.gpus}"
        )
    rows.sort(key=lambda r: (not r["fits"], r["step_time_s"], r["memory_bytes"]))
    return rows


def _stages(card: LayerCard, plan: LayerPlan) -> list[tuple[LayerRow, ...]]:
    found, start = [], 0
    for size in plan.stage_sizes:
        found.append(card.rows[start : start + size])
        start += size
    return found
