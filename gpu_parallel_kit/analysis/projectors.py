"""Each strategy's projector: the rows the cost model projects for it, named by its record
(`Strategy.projector`) and called by `projection._Experiment.rows` with the experiment's
workload, plan and measured runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..runs.results import RunResult
from ..strategies import Strategy
from .costmodel import data_parallel, data_pipeline, pipeline

if TYPE_CHECKING:
    from .projection import _Experiment


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
