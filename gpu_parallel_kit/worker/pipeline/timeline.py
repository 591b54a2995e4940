"""What a pipeline's timed steps say, whatever its backend: the per-task timeline, the bubble
measured, simulated and theoretical, the time spent across each cut and the runner's overheads.

Plain numbers from the runners' step reports (each task's stage, kind, micro-batch, start, end,
copy time and call time); no TensorFlow or JAX is imported, so both backends' pipelines fill the
same result fields from here.
"""

from __future__ import annotations

import statistics
from typing import Any

from ...pipeline.schedules import Schedule, micro_batch_count
from ...pipeline.simulation import bubble_fraction, simulate, theoretical_bubble
from ...pipeline.tasks import Pass, Task

# The planned chart: a backward costs about two forwards; split, its halves one each.
PLANNED_DURATION = {
    Pass.FORWARD: 1.0,
    Pass.BACKWARD: 2.0,
    Pass.INPUT_BACKWARD: 1.0,
    Pass.WEIGHT_BACKWARD: 1.0,
}
# The timeline's words: an input backward draws as the backward it is, beside its weight pass.
KIND_NAMES = {
    Pass.FORWARD: "forward",
    Pass.BACKWARD: "backward",
    Pass.INPUT_BACKWARD: "backward",
    Pass.WEIGHT_BACKWARD: "weight",
}


def schedule_figures(schedule: Schedule, reports: list[Any], spec: Any) -> dict[str, Any]:
    """Timeline, bubble (measured, simulated, theoretical), simulated step, bytes and time
    across the cuts, the runner's overheads and the communication time of the timed steps.

    `reports` are the runner's step reports: those with tasks and not `serial` are the timed
    training steps, the `serial` ones the passes where each task ran alone.
    """
    k = len(schedule)
    stages = 1 + max(t.stage for tasks in schedule for t in tasks)
    micro_batches = micro_batch_count(schedule)
    timed = [r.tasks for r in reports if r.tasks and not r.serial]
    measured = [records_as_dicts(tasks, step) for step, tasks in enumerate(timed)]
    alone = [r for r in reports if r.serial]
    durations = median_durations([r.tasks for r in alone])
    simulated = simulate(schedule, lambda t: durations[(t.stage, t.kind)]) if alone else []
    updates = [statistics.median(r.update_s[d] for r in alone) for d in range(k)] if alone else []
    chunk = 1.0 / spec.virtual_stages  # an interleaved chunk is 1/v of a device's share
    planned = simulate(schedule, lambda t: PLANNED_DURATION[t.kind] * chunk)
    measured_bubbles = [measured_bubble(tasks, k) for tasks in timed]
    trained = [r for r in reports if not r.serial]
    return {
        "timeline": [row for step in measured for row in step],
        "planned_timeline": [timed_as_dict(t) for t in planned],
        "simulated_timeline": [timed_as_dict(t) for t in simulated],
        "bubble_fraction": statistics.median(measured_bubbles) if measured_bubbles else None,
        "bubble_simulated": bubble_fraction(simulated, k) if simulated else None,
        "bubble_theoretical": theoretical_bubble(
            spec.schedule, k, micro_batches, spec.virtual_stages
        ),
        "virtual_stages": spec.virtual_stages,
        # Each device applies its stages' updates after its last task: the step ends with the
        # last update.
        "simulated_step_time_s": max(
            max(t.end for t in simulated if t.device == d) + updates[d] for d in range(k)
        )
        if simulated
        else None,
        "cut_bytes": trained[-1].cut_bytes if trained else [],
        # Several steps in one call of a one-stage model, as fit's steps_per_execution runs them.
        "steps_per_call": max((r.steps_in_call for r in trained), default=1),
        "cut_time_s": cut_times(timed, stages),
        **overheads([r for r in reports if r.tasks and not r.serial], alone),
        # Copies across cuts only: stage 0's copy of its input is feeding, not communication.
        "comm_time_s": statistics.median(
            sum(t.transfer_s for t in tasks if (t.stage, t.kind) != (0, Pass.FORWARD))
            for tasks in timed
        )
        if timed
        else None,
    }


def overheads(trained: list[Any], alone: list[Any]) -> dict[str, float | None]:
    """What the runner costs beyond the work: per task, its time minus the time inside its
    forward or backward call and minus its copies across the cut (median over the tasks of the
    timed steps, and of the serial passes where each task ran alone); per step, the time outside
    every task (splitting the batch, waiting, the updates), and the work alone (the serial
    passes' task times and, of that, the calls'), medians over the steps."""

    def per_task(reports: list[Any]) -> float | None:
        values = [t.end - t.start - t.call_s - t.transfer_s for r in reports for t in r.tasks]
        return statistics.median(values) if values else None

    def outside(report: Any) -> float:
        span = max(t.end for t in report.tasks) - min(t.start for t in report.tasks)
        return report.duration_s - span

    return {
        "task_overhead_s": per_task(trained),
        "task_overhead_alone_s": per_task(alone),
        "outside_tasks_s": statistics.median(outside(r) for r in trained) if trained else None,
        "work_alone_s": statistics.median(sum(t.end - t.start for t in r.tasks) for r in alone)
        if alone
        else None,
        "calls_alone_s": statistics.median(sum(t.call_s for t in r.tasks) for r in alone)
        if alone
        else None,
    }


def busy_and_idle(timed: list[list[Any]], stage: int) -> dict[str, float | None]:
    """Median over the timed steps of the stage's working time and of the rest of the step."""
    if not timed:
        return {"busy_s": None, "idle_s": None}
    busy = [sum(t.end - t.start for t in tasks if t.stage == stage) for tasks in timed]
    spans = [max(t.end for t in tasks) - min(t.start for t in tasks) for tasks in timed]
    return {
        "busy_s": statistics.median(busy),
        "idle_s": statistics.median(span - b for span, b in zip(spans, busy, strict=True)),
    }


def cut_times(timed: list[list[Any]], stages: int) -> list[float | None]:
    """Per cut, the median per step of the time spent copying across it: activations into the
    next stage's forwards, gradients into this stage's backwards."""
    if not timed:
        return [None] * (stages - 1)
    return [
        statistics.median(
            sum(t.transfer_s for t in tasks if _received_over(t, stages) == cut) for tasks in timed
        )
        for cut in range(stages - 1)
    ]


def _received_over(record: Any, stages: int) -> int | None:
    """The cut a task record's message came over, if any."""
    received = Task(record.stage, record.kind, record.micro_batch).received(stages)
    return None if received is None else received.cut


def records_as_dicts(tasks: list[Any], step: int) -> list[dict[str, Any]]:
    """A timed step's task records as the timeline's rows."""
    return [
        {
            "step": step,
            "device": t.stage if t.device is None else t.device,
            "stage": t.stage,
            "micro_batch": t.micro_batch,
            "kind": KIND_NAMES[t.kind],
            "start": t.start,
            "end": t.end,
            "transfer_s": t.transfer_s,  # the copy across the cut that began the task
        }
        for t in tasks
    ]


def timed_as_dict(task: Any) -> dict[str, Any]:
    """A simulated or planned task as the timeline's row."""
    return {
        "device": task.device,
        "stage": task.stage,
        "micro_batch": task.micro_batch,
        "kind": KIND_NAMES[task.kind],
        "start": task.start,
        "end": task.end,
    }


def median_durations(timed: list[list[Any]]) -> dict[tuple[int, Pass], float]:
    """Per (stage, kind), the median time of its tasks."""
    samples: dict[tuple[int, Pass], list[float]] = {}
    for tasks in timed:
        for t in tasks:
            samples.setdefault((t.stage, t.kind), []).append(t.end - t.start)
    return {key: statistics.median(values) for key, values in samples.items()}


def measured_bubble(tasks: list[Any], devices: int) -> float:
    """Idle share of the devices over the step, from the real task times."""
    span = max(t.end for t in tasks) - min(t.start for t in tasks)
    busy = sum(t.end - t.start for t in tasks)
    return max(0.0, 1.0 - busy / (devices * span)) if span > 0 else 0.0


def pipeline_row(
    micro_batches: int,
    comm_bytes: int | None,
    comm_time_s: float | None,
    step_time_s: float | None,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """A pipeline run's own fields of its row, whatever its backend: the M it ran (auto's
    choice, or the user's), the bytes and time across its cuts and their share of the step."""
    share = comm_time_s / step_time_s if step_time_s and comm_time_s is not None else None
    return {
        "micro_batches": micro_batches,
        "comm_bytes": comm_bytes,
        "comm_time_s": comm_time_s,
        "comm_share": share,
        "extra": extra,
    }
