"""Cost model of a pipeline whose stages live on (data, model) sub-meshes: three axes at once.

Pure Python, modelled, never measured (notation of `step_time_model.py`). K stages, each on
D × T devices, run a schedule over M micro-batches of G/M samples; each device computes G/(M·D)
samples of its stage. Every axis's traffic is charged on its own link, as a `GPUCluster` places
it (`GPUCluster.links`): a stage's activation all-reduces over its T tensor devices sit inside
its forward and backward tasks (half in each); its replicated weights' gradients are
all-reduced over the D replicas in each backward, once per micro-batch, as the kit's JAX
pipeline runs them; each replica sends its share of a micro-batch across a cut on the stages
link. A measured 3-D run (`mesh_axes` in its extra figures) gives each stage's work share, the
share of its weights a device holds (taken as the share of its compute it does), its tensor
collectives' bytes and count, and its gradient bytes.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from ...pipeline.schedules import BACKWARD, FORWARD, Task, build_schedule, splits_backward
from ...pipeline.simulation import makespan, simulate
from ...pipeline.tasks import WEIGHT
from ...runs.results.run_result import RunResult
from ...strategies.plan_axes import DATA, STAGES, TENSOR
from .hardware_presets import Interconnect
from .measured_inputs import measured_partition
from .step_time_model import Partition, Prediction, Workload, make_prediction, ring_all_reduce_s


@dataclass(frozen=True)
class MeshStage:
    """What one stage on a (data, model) sub-mesh does besides its share of the work."""

    held_share: float  # the share of the stage's weights (and compute) one device holds
    tensor_bytes_per_sample: float  # activation all-reduce bytes per sample of a replica
    tensor_collectives: int  # activation all-reduces per micro-batch
    gradient_bytes: float  # one device's replicated gradient bytes, all-reduced per micro-batch


@dataclass(frozen=True)
class MeshRun:
    """A measured pipeline run on sub-meshes, reduced to what the cost model needs."""

    data: int
    tensor: int
    partition: Partition
    stages: tuple[MeshStage, ...]
    note: str

    @property
    def devices(self) -> int:
        return self.data * self.tensor * self.partition.stages


def is_mesh_run(run: RunResult) -> bool:
    """Whether a finished pipeline row ran its stages on (data, model) sub-meshes."""
    return bool(run.ok and run.mesh and run.extra.get("mesh_axes") and run.extra.get("stages"))


def mesh_run(run: RunResult, cut_bytes: float | None = None) -> MeshRun:
    """The stages of a measured 3-D pipeline row, each with its collectives' bytes."""
    data, tensor = (int(n) for n in str(run.mesh).split("x"))
    rows = sorted(run.extra["stages"], key=lambda s: s["stage"])
    partition, note = measured_partition(run, len(rows), cut_bytes)
    held = (run.extra.get("memory") or {}).get("devices") or {}
    local_batch = run.global_batch / data
    parts = max(int(run.micro_batches or 1), 1)
    stages = []
    for row in rows:
        full = row.get("parameter_bytes") or 0
        on_devices = [held[name]["params_bytes"] for name in row.get("devices", []) if name in held]
        share = statistics.fmean(on_devices) / full if full and on_devices else 1.0
        stages.append(
            MeshStage(
                held_share=min(1.0, max(share, 1.0 / tensor)),
                tensor_bytes_per_sample=(row.get("tensor_all_reduce_bytes") or 0) / local_batch,
                tensor_collectives=int(row.get("tensor_collectives") or 0),
                gradient_bytes=(row.get("data_all_reduce_bytes") or 0) / parts,
            )
        )
    shares = ", ".join(f"{s.held_share:.0%}" for s in stages)
    note += (
        f"; each stage on a {data}x{tensor} (data, model) sub-mesh as in {run.run_id}: a device "
        f"computes the share of its stage's weights it holds ({shares}), its tensor collectives "
        "half in the forward and half in the backward, its replicated gradients all-reduced "
        "over the data axis in each backward"
    )
    return MeshRun(data, tensor, partition, tuple(stages), note)


def axis_links(
    cluster: Any, link: Interconnect, reduce_link: Interconnect | None, sizes: dict[str, int]
) -> dict[str, Interconnect | None]:
    """Each axis of a data × tensor × stages run (`sizes`) and its link, None for an axis of
    one: a `GPUCluster`'s placement on its first GPUs, else `link` (the data axis's all-reduces
    on `reduce_link` when given)."""
    if cluster is not None:
        return cluster.first(math.prod(sizes.values())).links(**sizes)
    links = {TENSOR: link, STAGES: link, DATA: reduce_link or link}
    return {axis: links[axis] if sizes[axis] > 1 else None for axis in links}


def mesh_pipeline(
    workload: Workload,
    run: MeshRun,
    links: dict[str, Interconnect | None],
    *,
    global_batch: float,
    micro_batches: int = 1,
    schedule: str = "gpipe",
    overlap: bool = False,
) -> tuple[Prediction, dict[str, Any]]:
    """The step of `run`'s shape with each axis on its link (`links`: tensor, stages, data, as
    `GPUCluster.links` returns them; None for an axis of one). `workload` is one device's, at
    G/(M·D) samples. Returns the prediction and the communication by axis, in seconds per step
    on the busiest stage (tensor, data) or over every cut (stages)."""
    k, d, t = run.partition.stages, run.data, run.tensor
    plan = build_schedule(schedule, k, micro_batches)
    local = global_batch / micro_batches / d  # one device's samples of a micro-batch
    tensor_s, data_s = [], []
    for stage in run.stages:
        link = links.get("tensor")
        nbytes = stage.tensor_bytes_per_sample * local
        per_collective = nbytes / stage.tensor_collectives if stage.tensor_collectives else nbytes
        count = stage.tensor_collectives or (1 if nbytes else 0)
        tensor_s.append(count * ring_all_reduce_s(per_collective, t, link) if link else 0.0)
        link = links.get("data")
        data_s.append(ring_all_reduce_s(stage.gradient_bytes, d, link) if link else 0.0)
    work: dict[tuple[int, str], float] = {}
    for s, stage in enumerate(run.stages):
        scale = local * stage.held_share
        work[(s, FORWARD)] = run.partition.forward[s] * workload.forward_s * scale
        work[(s, BACKWARD)] = run.partition.backward[s] * workload.backward_s * scale
    comm = {(s, FORWARD): tensor_s[s] / 2 for s in range(k)}
    comm |= {(s, BACKWARD): tensor_s[s] / 2 + data_s[s] for s in range(k)}
    if splits_backward(plan):
        # zb-h1: the weight gradient takes half the backward and the gradient all-reduce.
        for s in range(k):
            work[(s, BACKWARD)] /= 2
            work[(s, WEIGHT)] = work[(s, BACKWARD)]
            comm[(s, BACKWARD)] -= data_s[s]
            comm[(s, WEIGHT)] = data_s[s]
    stage_link = links.get("stages")
    sends = [stage_link.send_s(a * local) if stage_link else 0.0 for a in run.partition.cut_bytes]

    def cut_send(stage: int) -> float:
        return sends[stage] if 0 <= stage < k - 1 else 0.0

    def compute(task: Task) -> float:
        return work[(task.stage, task.kind)]

    def inside(task: Task) -> float:
        return compute(task) + comm.get((task.stage, task.kind), 0.0)

    def blocking(task: Task) -> float:
        if task.kind == WEIGHT:
            return inside(task)
        return inside(task) + cut_send(task.stage - 1 if task.kind == FORWARD else task.stage)

    def in_flight(sender: Task) -> float:
        if sender.kind == WEIGHT:
            return 0.0
        return cut_send(sender.stage if sender.kind == FORWARD else sender.stage - 1)

    step = makespan(simulate(plan, inside, in_flight) if overlap else simulate(plan, blocking))
    busy = [
        micro_batches * sum(work.get((s, kind), 0.0) for kind in (FORWARD, BACKWARD, WEIGHT))
        for s in range(k)
    ]
    by_axis = {
        "tensor_comm_s": micro_batches * max(tensor_s),
        "data_comm_s": micro_batches * max(data_s),
        "send_comm_s": micro_batches * 2 * math.fsum(sends),
    }
    moved = 2 * global_batch * math.fsum(run.partition.cut_bytes) + math.fsum(
        2 * (t - 1) * s.tensor_bytes_per_sample * global_batch
        + 2 * (d - 1) * t * s.gradient_bytes * micro_batches
        for s in run.stages
    )
    prediction = make_prediction(
        workload,
        "pipeline",
        run.devices,
        global_batch,
        step,
        compute=max(busy),
        comm=math.fsum(by_axis.values()),
        moved=moved,
        bubble=1.0 - math.fsum(busy) / (k * step) if step > 0 else 0.0,
        exposed=step - makespan(simulate(plan, compute)),
    )
    return prediction, by_axis
