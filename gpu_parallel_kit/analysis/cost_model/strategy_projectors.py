"""Each strategy's projector, and the cost function of sharded data parallelism.

A projector is named by its strategy's record (`Strategy.projector`) and called by
`projected_rows._Experiment.rows` with the experiment's workload, plan and measured runs. For fsdp
(ZeRO-3) over N devices, with S_s the sharded weights' bytes and S_r the replicated ones', and
AG(S) = RS(S) = α(N-1) + (N-1)/N · S/B::

    no prefetch:  T = (f + b) · G/N + 2·AG(S_s) + RS(S_s) + C(S_r)
    prefetch:     T = max(f · G/N, AG(S_s)) + max(b · G/N, AG(S_s) + RS(S_s) + C(S_r))

Why, and the bytes each device moves: `docs/projection.md`, "The model, in formulas".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import GpkError
from ...runs.results.run_result import RunResult
from ...strategies import Strategy
from ...strategies.plan_axes import DATA, STAGES, TENSOR
from .hardware_presets import Interconnect
from .measured_inputs import NotedFigure
from .mesh_pipeline import axis_links, is_mesh_run, mesh_pipeline, mesh_run
from .step_time_model import (
    Prediction,
    Workload,
    check_devices,
    data_parallel,
    data_pipeline,
    make_prediction,
    pipeline,
    ring_all_reduce_s,
)

if TYPE_CHECKING:
    from .projected_rows import _Experiment


def project_data(experiment: _Experiment, record: Strategy) -> list[RunResult]:
    """Replicas whose gradients cross the link in one ring all-reduce per step."""
    plan, rows = experiment.plan, []
    note = "one flat ring over every device" if record.processes else ""
    for n in plan.counts:
        batch = experiment.batch(n)
        p = data_parallel(
            experiment.workload_at(batch / n),
            n,
            plan.link,
            global_batch=batch,
            overlap=plan.overlap,
        )
        key = f"{record.name}-{n}"
        rows.append(experiment.row(p, key, note, strategy=record.name, all_reduce="ring"))
    return rows


def project_pipeline(experiment: _Experiment, record: Strategy) -> list[RunResult]:
    """Stages on devices, each schedule and micro-batch count the runs measured (or asked)."""
    plan, rows = experiment.plan, []
    for schedule, m in experiment.pipeline_configs():
        for k in plan.counts:
            part, note = experiment.partition(k)
            options = {"micro_batches": m, "schedule": schedule, "overlap": plan.overlap}
            batch = experiment.batch(k)
            workload = experiment.workload_at(batch / m)  # one micro-batch at a time
            p = pipeline(workload, part, plan.link, global_batch=batch, **options)
            key = f"{record.name}-{schedule}-m{m}-{k}"
            rows.append(experiment.row(p, key, note, schedule=schedule, micro_batches=m))
    return rows + project_mesh_pipeline(experiment, record)


def project_mesh_pipeline(experiment: _Experiment, record: Strategy) -> list[RunResult]:
    """Each measured pipeline run on (data, model) sub-meshes at its own shape, when its device
    count is asked: every axis's traffic on the link that axis crosses (`mesh_pipeline`)."""
    plan, rows = experiment.plan, []
    asked = plan.schedule is not None or plan.micro_batches is not None
    for run in (r for r in experiment.models if is_mesh_run(r) and r.devices in plan.counts):
        shape = mesh_run(run, plan.cut_bytes)
        d, t, k = shape.data, shape.tensor, shape.partition.stages
        own = (run.schedule, run.micro_batches or 1)
        schedule, m = experiment.pipeline_configs()[0] if asked else own
        sizes = {DATA: d, TENSOR: t, STAGES: k}
        links = axis_links(plan.cluster, plan.link, plan.reduce_link, sizes)
        batch = experiment.batch(run.devices)
        projected = mesh_pipeline(
            experiment.workload_at(batch / m / d),  # one device's share of a micro-batch
            shape,
            links,
            global_batch=batch,
            micro_batches=m,
            schedule=schedule,
            overlap=plan.overlap,
        )
        key = f"{record.name}-{schedule}-m{m}-{d}x{t}x{k}"
        row = experiment.row(
            projected.prediction,
            key,
            shape.note,
            schedule=schedule,
            micro_batches=m,
            mesh=f"{d}x{t}",
        )
        row.extra.update(projected.comm_by_axis)
        row.extra["mesh_axes"] = run.extra["mesh_axes"]
        row.extra["links"] = {axis: link and link.name for axis, link in links.items()}
        rows.append(row)
    return rows


def project_data_pipeline(experiment: _Experiment, record: Strategy) -> list[RunResult]:
    """Copies of a K-stage pipeline (`hybrid_stages`), each stage's gradients all-reduced
    between the copies after the flush, for every count that is 2K or more and a multiple of K."""
    plan, k = experiment.plan, experiment.plan.hybrid_stages or 1
    schedule, m = experiment.pipeline_configs()[0]
    part, note = experiment.partition(k)
    rows = []
    options = {"micro_batches": m, "schedule": schedule, "overlap": plan.overlap}
    for d in (n // k for n in plan.counts if n % k == 0 and n // k >= 2):
        p = data_pipeline(
            experiment.workload_at(experiment.batch(d * k) / d / m),
            part,
            d,
            plan.link,
            global_batch=experiment.batch(d * k),
            data_link=plan.reduce_link,
            **options,
        )
        note_d = f"{note}; {d} copies, each stage's gradients all-reduced after the flush"
        key = f"{record.name}-{d}x{k}-{schedule}-m{m}"
        rows.append(experiment.row(p, key, note_d, schedule=schedule, micro_batches=m))
    return rows


def project_tensor(experiment: _Experiment, record: Strategy) -> list[RunResult]:
    """Layers sharded over the model axis, from the measured run's layout (`tensor_cost`)."""
    return experiment.tensor_rows()


def sharded_data_parallel(
    workload: Workload,
    devices: int,
    link: Interconnect,
    *,
    global_batch: float,
    sharded_share: float = 1.0,
    prefetch: bool = False,
    name: str = "fsdp",
) -> Prediction:
    """N devices each computing G/N samples with `sharded_share` of the parameter bytes sharded
    over them (gathered twice, reduce-scattered) and the rest all-reduced; see the module."""
    check_devices(devices)
    if not 0.0 <= sharded_share <= 1.0:
        raise GpkError(f"sharded_share={sharded_share} is not a share; give 0 to 1")
    share = global_batch / devices
    forward, backward = workload.forward_s * share, workload.backward_s * share
    sharded = workload.parameter_bytes * sharded_share
    replicated = workload.parameter_bytes - sharded
    gather = ring_all_reduce_s(sharded, devices, link) / 2
    scatter = gather
    reduce = ring_all_reduce_s(replicated, devices, link)
    comm = 2 * gather + scatter + reduce
    if prefetch:
        step = max(forward, gather) + max(backward, gather + scatter + reduce)
    else:
        step = forward + backward + comm
    return make_prediction(
        workload,
        name,
        devices,
        global_batch,
        step,
        compute=forward + backward,
        comm=comm,
        moved=(devices - 1) * (3 * sharded + 2 * replicated),
    )


def fsdp_sharded_share(runs: tuple[RunResult, ...]) -> NotedFigure:
    """The share of parameter bytes a measured fsdp run's layout sharded (it gathered each of
    them twice), else all of them, assumed."""
    for run in runs:
        gathered, total = run.extra.get("all_gather_bytes"), run.extra.get("parameter_bytes")
        if run.ok and gathered is not None and total and run.devices > 1:
            model = run.devices // max(1, int(str(run.mesh or "1x1").split("x")[0]))
            share = min(1.0, gathered / 2 * model / total)
            note = f"{share:.0%} of the parameter bytes sharded, as in run {run.run_id}"
            return NotedFigure(share, note)
    return NotedFigure(1.0, "every weight sharded over the devices (assumed: no measured fsdp run)")


def project_fsdp(experiment: _Experiment, record: Strategy) -> list[RunResult]:
    """Every device on the data axis, large weights sharded over all of them; the step with
    and without prefetch, the row taking `overlap` and its extra the other."""
    plan, rows = experiment.plan, []
    ours = tuple(r for r in experiment.runs if r.strategy == record.name)
    sharded, note = fsdp_sharded_share(ours)
    for n in plan.counts:
        batch = experiment.batch(n)
        workload = experiment.workload_at(batch / n)
        both = {
            prefetch: sharded_data_parallel(
                workload,
                n,
                plan.link,
                global_batch=batch,
                sharded_share=sharded,
                prefetch=prefetch,
                name=record.name,
            )
            for prefetch in (False, True)
        }
        row = experiment.row(both[plan.overlap], f"{record.name}-{n}", note, mesh=f"{n}x1")
        row.extra["step_time_prefetch_s"] = both[True].step_time_s
        row.extra["step_time_no_prefetch_s"] = both[False].step_time_s
        rows.append(row)
    return rows
