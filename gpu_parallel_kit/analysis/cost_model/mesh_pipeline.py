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
from typing import Any, NamedTuple

from ...pipeline.schedules import BACKWARD, FORWARD, build_schedule, splits_backward
from ...pipeline.tasks import INPUT_BACKWARD, WEIGHT, Pass, Schedule
from ...runs.results.run_result import RunResult
from ...strategies.plan_axes import DATA, STAGES, TENSOR
from .hardware_presets import Interconnect
from .measured_inputs import measured_partition
from .pipeline_replay import PipelineTasks, replay, stage_work
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


class MeshStep(NamedTuple):
    """A pipeline on sub-meshes, predicted: the step, and its communication by axis."""

    prediction: Prediction
    # Seconds per step: `tensor_comm_s` and `data_comm_s` on the busiest stage, `send_comm_s`
    # over every cut.
    comm_by_axis: dict[str, float]


def mesh_pipeline(
    workload: Workload,
    run: MeshRun,
    links: dict[str, Interconnect | None],
    *,
    global_batch: float,
    micro_batches: int = 1,
    schedule: str = "gpipe",
    overlap: bool = False,
) -> MeshStep:
    """The step of `run`'s shape with each axis on its link (`links`: tensor, stages, data, as
    `GPUCluster.links` returns them; None for an axis of one). `workload` is one device's, at
    G/(M·D) samples."""
    k, d, t = run.partition.stages, run.data, run.tensor
    plan = build_schedule(schedule, k, micro_batches)
    local = global_batch / micro_batches / d  # one device's samples of a micro-batch
    forward, backward, tensor_s, data_s = [], [], [], []
    for s, stage in enumerate(run.stages):
        scale = local * stage.held_share
        forward.append(run.partition.forward[s] * workload.forward_s * scale)
        backward.append(run.partition.backward[s] * workload.backward_s * scale)
        link = links.get("tensor")
        nbytes = stage.tensor_bytes_per_sample * local
        per_collective = nbytes / stage.tensor_collectives if stage.tensor_collectives else nbytes
        count = stage.tensor_collectives or (1 if nbytes else 0)
        tensor_s.append(count * ring_all_reduce_s(per_collective, t, link) if link else 0.0)
        link = links.get("data")
        data_s.append(ring_all_reduce_s(stage.gradient_bytes, d, link) if link else 0.0)
    stage_link = links.get("stages")
    sends = [stage_link.send_s(a * local) if stage_link else 0.0 for a in run.partition.cut_bytes]
    tasks = PipelineTasks(
        plan, stage_work(plan, forward, backward), sends, _collectives(plan, tensor_s, data_s)
    )
    step = replay(tasks, overlap)
    by_axis = {
        "tensor_comm_s": micro_batches * max(tensor_s),
        "data_comm_s": micro_batches * max(data_s),
        "send_comm_s": step.sends_s,
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
        step.step_s,
        compute=max(step.busy_s),
        comm=math.fsum(by_axis.values()),
        moved=moved,
        bubble=step.bubble,
        exposed=step.step_s - step.free_s,
    )
    return MeshStep(prediction, by_axis)


def _collectives(
    schedule: Schedule, tensor_s: list[float], data_s: list[float]
) -> dict[tuple[int, Pass], float]:
    """Each task's collectives, by (stage, kind): a stage's tensor all-reduces half in its
    forward and half in its backward, its gradients' all-reduce in its backward, or in its
    weight gradient where the schedule splits the backward (zb-h1)."""
    split = splits_backward(schedule)
    comm = {}
    for s, (tensor, data) in enumerate(zip(tensor_s, data_s, strict=True)):
        comm[(s, FORWARD)] = tensor / 2
        if split:  # the gradients' all-reduce moves to the weight gradient
            comm[(s, INPUT_BACKWARD)] = tensor / 2
            comm[(s, WEIGHT)] = data
        else:
            comm[(s, BACKWARD)] = tensor / 2 + data
    return comm
