"""The pipeline engine: the model's graph cut into stages on different devices, one thread each.

`naive` sends the whole batch through the stages in turn (all but one device idle); the others cut
it into micro-batches that fill the pipeline. All give single-device training's gradients (summed
over micro-batches, applied once per batch); BatchNormalization sees micro-batches, as in GPipe.
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

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
from ...keras_internals import compile_config
from ...measuring.recorder import StepRecorder
from ...pipeline.measured_curve import curve_and_choice
from ...pipeline.microbatch_choice import curve_fields
from ...pipeline.runner_messages import StepReport
from ...pipeline.schedule_runner import ScheduleRunner, passes_alone, train_steps
from ...pipeline.timeline import busy_and_idle, pipeline_row, schedule_figures
from ...strategy_hooks import ModelAndBatches
from ..engines.base import Engine
from ..keras_internals import compile_loss_class
from .stage_calls import front, split, stage_tasks
from .stage_memory import (
    activation_bytes_per_micro_batch,
    check_stages,
    held_activations,
    stage_memory,
)
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


class _Trained(NamedTuple):
    """What training leaves for the passes alone and the figures."""

    stages: list[Stage]
    schedule: tuple[tuple[Task, ...], ...]
    runner: ScheduleRunner
    reports: list[StepReport]
    sample: Any  # a micro-batch of x, for the stages' activation sizes
    first_x: Any
    first_y: Any


class PipelineEngine(Engine):
    """Stages on devices, one thread per device following the schedule (an interleaved schedule
    puts `virtual_stages` stages on each device, round robin).

    >>> exp.run(strategy="pipeline", devices=4, schedule="gpipe", micro_batches=8)
    """

    name = "pipeline"

    def make_distribution(self) -> tf.distribute.Strategy:
        return tf.distribute.get_strategy()  # no replicas: stages are placed by hand

    def scope(self) -> contextlib.AbstractContextManager:
        # The whole model is first built in host memory, then each stage is rebuilt on its device.
        return tf.device("/cpu:0")

    def train(self, run: ModelAndBatches, steps_per_epoch: int, recorder: StepRecorder) -> None:
        model, dataset = run
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
            spec, tasks, lambda x: feed(traced, x), front, first_x, first_y, split_backward
        )
        micro_batches = self._choice.micro_batches if self._choice else 1
        schedule = build_schedule(spec.schedule, k, micro_batches, chunks)
        micro_batch = split(first_x, micro_batches)[0]
        check_stages(stages, spec.memory_budget, traced, micro_batch, schedule)
        self._held = held_activations(stages, traced, micro_batch, schedule)
        for task in tasks:
            task.set_micro_batches(micro_batches)
        runner = ScheduleRunner(tasks, schedule, micro_batches, lambda x: feed(traced, x), split)
        trained, firsts = (stages, schedule, runner), (sample, first_x, first_y)
        try:
            reports = train_steps(
                runner,
                iterator.get_next,
                spec.training.epochs,
                steps_per_epoch,
                recorder,
                first=(first_x, first_y),
                round_end=lambda steps: self._round(_Trained(*trained, steps, *firsts)),
            )
        finally:
            copy_back(stages)  # what was trained, as on JAX, even when a step failed
        self._round(_Trained(*trained, reports, *firsts))

    def _round(self, trained: _Trained) -> None:
        """A round's training (of those this process trains), for its row."""
        self._alone: list[StepReport] = []
        self._trained = trained

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

    def time_tasks_alone(self, run: ModelAndBatches) -> None:
        """Time every task alone (one at a time, on one batch, a few times) for the simulated
        view, then put the weights back: the measurement must not train the model."""
        trained = self._trained
        self._alone = passes_alone(trained.runner, trained.first_x, trained.first_y)

    def result_fields(self, run: ModelAndBatches, step_time_s: float | None) -> dict[str, Any]:
        """The schedule's figures from the timed steps (and the passes alone, when timed: the
        simulated view), the stages, and the micro-batch curve."""
        trained = self._trained
        figures = _figures(trained, self._traced, self._alone, self.spec)
        comm_time = figures.pop("comm_time_s")
        figures.update(
            curve_fields(self.spec, self._curve, self._choice, self._alone, figures["cut_bytes"])
        )
        return pipeline_row(
            micro_batch_count(trained.schedule),
            sum(figures["cut_bytes"]) if figures["cut_bytes"] else None,
            comm_time,
            step_time_s,
            {
                **figures,
                "stage_tasks": "compiled, backward recomputes forward"
                if self.spec.recompute
                else "eager, tape kept",
                "state_bytes": self.state_bytes,
                "parameter_bytes": sum(s["parameter_bytes"] for s in figures["stages"]),
                "memory": stage_memory(trained.stages, self._held),
            },
        )


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
    trained: _Trained, traced: TracedModel, alone: list[StepReport], spec: Any
) -> dict[str, Any]:
    """Timeline, bubble (measured, simulated, theoretical), bytes across cuts
    (`worker/pipeline/timeline.py`), and memory per stage, from the training steps and the
    passes `alone`."""
    stages, schedule, sample = trained.stages, trained.schedule, trained.sample
    reports = trained.reports + alone
    n = len(stages)
    timed = [r.tasks for r in reports if r.tasks and not r.serial]
    activation_bytes = activation_bytes_per_micro_batch(stages, traced, sample)
    trained = [r for r in reports if not r.serial]
    peak_live = [max(r.peak_live[s] for r in trained) for s in range(n)] if trained else [0] * n
    return {
        **schedule_figures(schedule, reports, spec),
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
                **busy_and_idle(timed, s.index),
            }
            for s in stages
        ],
    }
