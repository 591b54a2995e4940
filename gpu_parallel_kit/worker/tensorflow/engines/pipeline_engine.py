"""The pipeline engine: the model's graph cut into stages on different devices, one thread each.

`naive` sends the whole batch through the stages in turn (all but one device idle); the others cut
it into micro-batches that fill the pipeline. All give single-device training's gradients (summed
over micro-batches, applied once per batch); BatchNormalization sees micro-batches, as in GPipe.
"""

from __future__ import annotations

import contextlib
import statistics
from typing import Any

import keras
import tensorflow as tf

from ....pipeline.microbatch import candidates, is_auto
from ....pipeline.schedules import (
    Task,
    build_schedule,
    device_of,
    micro_batch_count,
    splits_backward,
)
from ....pipeline.simulation import bubble_fraction, simulate, theoretical_bubble
from ...keras_internals import compile_config
from ...measuring.recorder import StepRecorder
from ..keras_internals import compile_loss_class
from .base import Engine
from .curve import curve_and_choice, serial_curve
from .stage_memory import activation_bytes_per_micro_batch, check_stages
from .stage_runner import PipelineRunner, StepReport, TaskRecord, split, stage_tasks
from .stages import (
    Stage,
    TracedModel,
    build_stages,
    copy_back,
    describe,
    feed,
    stage_starts,
    trace,
    variable_devices,
)

TIMED_STEPS = 3  # steps after warm-up whose every task is timed for the timeline
SERIAL_REPEATS = 3  # untimed-by-others passes whose task times feed the simulated view
# The planned chart: a backward costs about two forwards; split, its halves one each.
PLANNED_DURATION = {"F": 1.0, "B": 2.0}
PLANNED_SPLIT_DURATION = {"F": 1.0, "B": 1.0, "W": 1.0}


class PipelineEngine(Engine):
    """Stages on devices, one thread per device following the schedule (an interleaved schedule
    puts `virtual_stages` stages on each device, round robin).

    >>> exp.run(strategy="pipeline", devices=4, schedule="gpipe", micro_batches=8)
    """

    name = "pipeline"

    def make_distribution(self) -> tf.distribute.Strategy:
        return tf.distribute.get_strategy()  # no replicas: stages are placed by hand

    def build_scope(self) -> contextlib.AbstractContextManager:
        # The whole model is first built in host memory, then each stage is rebuilt on its device.
        return tf.device("/cpu:0")

    def train(
        self,
        model: keras.Model,
        dataset: tf.data.Dataset,
        steps_per_epoch: int,
        recorder: StepRecorder,
    ) -> None:
        spec = self.spec
        recorder.before_timing()  # the curve and balance="time" are timed before the first step
        micro_batches = 1 if is_auto(spec.micro_batches) else spec.micro_batches or 1
        iterator = iter(dataset)
        first_x, first_y = next(iter(dataset))
        traced = trace(model)
        sample = split(first_x, micro_batches)[0]  # auto: balanced on the whole batch
        k, chunks = spec.devices.count, spec.virtual_stages
        starts = stage_starts(traced, k, chunks, spec.balance, sample)
        placed = [self.device_names[device_of(s, k)] for s in range(k * chunks)]
        stages = build_stages(model, traced, starts, tuple(placed))
        self._stages, self._traced = stages, traced  # validation runs them in order (predict)
        self.state_bytes = dict.fromkeys(self.device_names, 0)
        for s in stages:
            self.state_bytes[s.device] += s.parameter_bytes + s.optimizer_bytes
        check_stages(stages, spec.memory_budget)  # model states, before the curve's timing
        first = candidates(spec.schedule, k, spec.global_batch, chunks)[0]
        split_backward = splits_backward(build_schedule(spec.schedule, k, first, chunks))
        tasks = stage_tasks(stages, _loss(model, traced), 1, spec.recompute, split_backward)
        self._curve, self._choice = curve_and_choice(
            spec, stages, tasks, lambda x: feed(traced, x), first_x, first_y
        )
        micro_batches = self._choice.micro_batches if self._choice else 1
        schedule = build_schedule(spec.schedule, k, micro_batches, chunks)
        micro_batch = split(first_x, micro_batches)[0]
        check_stages(stages, spec.memory_budget, traced, micro_batch, schedule)
        runner = PipelineRunner(
            stages,
            schedule,
            micro_batches,
            _loss(model, traced),
            lambda x: feed(traced, x),
            recompute=spec.recompute,
            tasks=tasks,
        )
        timed = set(range(recorder.warmup_steps, recorder.warmup_steps + TIMED_STEPS))
        reports: list[StepReport] = []
        try:
            recorder.train_begin()
            step_index = 0
            for _ in range(spec.training.epochs):
                recorder.epoch_begin()
                losses = []
                for _ in range(steps_per_epoch):
                    x, y = next(iterator)
                    report = runner.step(x, y, timed=step_index in timed)
                    reports.append(report)
                    losses.append(report.loss)
                    recorder.step_end()
                    step_index += 1
                recorder.epoch_end({"loss": sum(losses) / len(losses)})
        except BaseException:
            runner.close()
            raise
        copy_back(stages)
        self._pipeline = (
            stages,
            schedule,
            runner,
            reports,
            micro_batches,
            sample,
            first_x,
            first_y,
        )

    def predict(self, model: keras.Model, x: Any) -> tuple[Any, Any]:
        """The stages' forward passes in order, each on its device, and their regularization."""
        regularization = tf.constant(0.0)
        values = feed(self._traced, x)
        for stage in self._stages:
            with tf.device(stage.device):
                values = stage.forward(values, training=False)
                for loss in stage.model.losses:
                    regularization += tf.cast(loss, tf.float32)
        return _predictions(self._traced, values), regularization

    def live_optimizer(self, model: keras.Model) -> keras.optimizers.Optimizer:
        # Each stage has its own copy of the optimizer, all on the same schedule.
        return self._stages[0].optimizer if getattr(self, "_stages", None) else model.optimizer

    def measure(self, model: keras.Model, dataset: tf.data.Dataset) -> None:
        """Time every task alone (one at a time, on one batch, a few times) for the simulated
        view, then put the weights back: the measurement must not train the model."""
        stages, schedule, runner, reports, micro_batches, sample, x, y = self._pipeline
        saved = [[v.numpy() for v in (*s.model.weights, *s.optimizer.variables)] for s in stages]
        try:
            alone = [runner.step(x, y, serial=True) for _ in range(SERIAL_REPEATS)]
        finally:
            runner.close()
            for stage, values in zip(stages, saved, strict=True):
                for variable, value in zip(
                    (*stage.model.weights, *stage.optimizer.variables), values, strict=True
                ):
                    variable.assign(value)
        self._figures = _figures(stages, self._traced, schedule, reports + alone, self.spec, sample)
        if self._curve is None:  # one micro-batch, nothing chosen: the serial passes' curve
            self._curve, self._choice = serial_curve(self.spec, alone, self._figures["cut_bytes"])
        self._figures["microbatch_curve"] = self._curve.to_dict()
        self._figures["microbatch_choice"] = self._choice.to_dict()

    def result_fields(self, step_time_s: float | None) -> dict[str, Any]:
        figures = dict(self._figures)
        comm_time = figures.pop("comm_time_s")
        return {
            "micro_batches": self._choice.micro_batches,  # auto's choice, or the user's M
            "comm_bytes": sum(figures["cut_bytes"]) if figures["cut_bytes"] else None,
            "comm_time_s": comm_time,
            "comm_share": comm_time / step_time_s
            if step_time_s and comm_time is not None
            else None,
            "extra": {
                **figures,
                "stage_tasks": "compiled, backward recomputes forward"
                if self.spec.recompute
                else "eager, tape kept",
                "state_bytes": self.state_bytes,
                "parameter_bytes": sum(s["parameter_bytes"] for s in figures["stages"]),
            },
        }


def _predictions(traced: TracedModel, values: dict[str, tf.Tensor]) -> Any:
    """The last stage's outputs in the structure of the model's own outputs."""
    flat = [values[name] for name in traced.graph.sinks]
    return keras.tree.pack_sequence_as(traced.outputs, flat)


def _loss(model: keras.Model, traced: TracedModel):
    """The model's compiled loss (strings, objects, one per output), as the last stage needs it:
    (targets, the last stage's outputs by name) -> the mean loss of the micro-batch."""
    config = compile_config(model)
    compiled = compile_loss_class()(
        config.get("loss", model.loss),
        config.get("loss_weights"),
        output_names=getattr(model, "output_names", None),
    )

    def loss(y: Any, values: dict[str, tf.Tensor]) -> tf.Tensor:
        return compiled(y, _predictions(traced, values))

    return loss


def _figures(
    stages: list[Stage],
    traced: TracedModel,
    schedule: tuple[tuple[Task, ...], ...],
    reports: list[StepReport],
    spec: Any,
    sample: tf.Tensor,
) -> dict[str, Any]:
    """Timeline, bubble (measured, simulated, theoretical), bytes across cuts, memory per stage."""
    k, n = len(schedule), len(stages)  # devices, model stages (more when interleaved)
    micro_batches = micro_batch_count(schedule)  # auto's choice too
    timed = [r.tasks for r in reports if r.tasks and not r.serial]
    measured = [_records_as_dicts(tasks, step) for step, tasks in enumerate(timed)]
    alone = [r for r in reports if r.serial]
    durations = _median_durations([r.tasks for r in alone])
    simulated = simulate(schedule, lambda t: durations[(t.stage, t.kind)]) if alone else []
    updates = [statistics.median(r.update_s[d] for r in alone) for d in range(k)] if alone else []
    planned_cost = PLANNED_SPLIT_DURATION if splits_backward(schedule) else PLANNED_DURATION
    chunk = 1.0 / spec.virtual_stages  # an interleaved chunk is 1/v of a device's share
    planned = simulate(schedule, lambda t: planned_cost[t.kind] * chunk)
    measured_bubbles = [_measured_bubble(tasks, k) for tasks in timed]
    activation_bytes = activation_bytes_per_micro_batch(stages, traced, sample)
    trained = [r for r in reports if not r.serial]
    peak_live = [max(r.peak_live[s] for r in trained) for s in range(n)] if trained else [0] * n
    return {
        "timeline": [row for step in measured for row in step],
        "planned_timeline": [_timed_as_dict(t) for t in planned],
        "simulated_timeline": [_timed_as_dict(t) for t in simulated],
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
        "cut_time_s": _cut_times(timed, n),
        **_overheads([r for r in reports if r.tasks and not r.serial], alone),
        # Copies across cuts only: stage 0's copy of its input is feeding, not communication.
        "comm_time_s": statistics.median(
            sum(t.transfer_s for t in tasks if (t.stage, t.kind) != (0, "F")) for tasks in timed
        )
        if timed
        else None,
        "stages": [
            {
                "stage": s.index,
                "device": s.device,
                "layers": list(s.layer_names),
                **describe(s, traced),
                "parameter_bytes": s.parameter_bytes,
                "optimizer_bytes": s.optimizer_bytes,
                "variable_devices": sorted(variable_devices(s)),
                "peak_live_micro_batches": peak_live[s.index],
                "activation_bytes_held": peak_live[s.index] * activation_bytes[s.index],
                **_busy_and_idle(timed, s.index),
            }
            for s in stages
        ],
    }


def _overheads(trained: list[StepReport], alone: list[StepReport]) -> dict[str, float | None]:
    """What the engine costs beyond the work: per task, its time minus the time inside its
    forward or backward call and minus its copies across the cut (median over the tasks of the
    timed steps, and of the serial passes where each task ran alone); per step, the time outside
    every task (splitting the batch, waiting, the updates), and the work alone (the serial
    passes' task times and, of that, the calls'), medians over the steps."""

    def per_task(reports: list[StepReport]) -> float | None:
        values = [t.end - t.start - t.call_s - t.transfer_s for r in reports for t in r.tasks]
        return statistics.median(values) if values else None

    def outside(report: StepReport) -> float:
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


def _busy_and_idle(timed: list[list[TaskRecord]], stage: int) -> dict[str, float | None]:
    """Median over the timed steps of the stage's working time and of the rest of the step."""
    if not timed:
        return {"busy_s": None, "idle_s": None}
    busy = [sum(t.end - t.start for t in tasks if t.stage == stage) for tasks in timed]
    spans = [max(t.end for t in tasks) - min(t.start for t in tasks) for tasks in timed]
    return {
        "busy_s": statistics.median(busy),
        "idle_s": statistics.median(span - b for span, b in zip(spans, busy, strict=True)),
    }


def _cut_times(timed: list[list[TaskRecord]], stages: int) -> list[float | None]:
    """Per cut, the median per step of the time spent copying across it: activations into the
    next stage's forwards, gradients into this stage's backwards."""
    if not timed:
        return [None] * (stages - 1)
    return [
        statistics.median(
            sum(t.transfer_s for t in tasks if (t.stage, t.kind) in ((cut + 1, "F"), (cut, "B")))
            for tasks in timed
        )
        for cut in range(stages - 1)
    ]


KIND_NAMES = {"F": "forward", "B": "backward", "W": "weight"}


def _records_as_dicts(tasks: list[TaskRecord], step: int) -> list[dict[str, Any]]:
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


def _timed_as_dict(task) -> dict[str, Any]:
    return {
        "device": task.device,
        "stage": task.stage,
        "micro_batch": task.micro_batch,
        "kind": KIND_NAMES[task.kind],
        "start": task.start,
        "end": task.end,
    }


def _median_durations(timed: list[list[TaskRecord]]) -> dict[tuple[int, str], float]:
    samples: dict[tuple[int, str], list[float]] = {}
    for tasks in timed:
        for t in tasks:
            samples.setdefault((t.stage, t.kind), []).append(t.end - t.start)
    return {key: statistics.median(values) for key, values in samples.items()}


def _measured_bubble(tasks: list[TaskRecord], stages: int) -> float:
    """Idle share of the devices over the step, from the real task times."""
    span = max(t.end for t in tasks) - min(t.start for t in tasks)
    busy = sum(t.end - t.start for t in tasks)
    return max(0.0, 1.0 - busy / (stages * span)) if span > 0 else 0.0
