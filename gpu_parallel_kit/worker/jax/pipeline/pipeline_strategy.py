"""`pipeline` on JAX: the model's graph cut into stages on devices, one compiled program per
stage pass, micro-batches run by the schedule's task lists (MPMD on one process).

The stages are cut as on TensorFlow (`worker/pipeline/layer_graph.py`: balance by parameters, time,
positions or names), each stage's passes are compiled once on its device
(`stage_functions.py`), and the same task lists the TensorFlow engine runs are executed by one
thread per device (`schedule_runner.py`). With `mesh=(data, model)` each stage lives on a
sub-mesh of data × model devices, its layers split over the model axis as `tensor` splits them
and its micro-batch over the data axis (`stage_mesh.py`). The gradients of single-device
training are summed over the micro-batches and applied once per batch by each stage's copy of
the model's optimizer; the trained weights are copied back into the user's model.

>>> exp.run(strategy="pipeline", devices=4, schedule="1f1b", micro_batches=8, backend="jax")
"""

from __future__ import annotations

import functools
import itertools
import time
from typing import Any

import jax
import keras
import numpy as np

from ....errors import GpkError
from ....pipeline.microbatch import Choice, Curve, candidates, is_auto
from ....pipeline.schedules import build_schedule, device_of, micro_batch_count, splits_backward
from ....sharding.layout import Layout
from ....strategies.plan_axes import mesh_label
from ...budget import check_budget
from ...keras_internals import compile_config, compile_loss_class
from ...measuring.recorder import StepRecorder
from ...pipeline.layer_graph import TracedModel, stage_starts, trace
from ...pipeline.measured_curve import curve_and_choice
from ...pipeline.microbatch_choice import curve_fields, pipeline_stages
from ...pipeline.runner_messages import StepReport
from ...pipeline.schedule_runner import ScheduleRunner, passes_alone, train_steps
from ...pipeline.timeline import pipeline_row
from ...strategy_hooks import ModelAndBatches
from ..sequence_split import stage_activations
from ..strategies import JaxStrategy
from .pipeline_figures import figures, stage_memory, tensor_bytes
from .stage_calls import StageFunctions, front, split
from .stage_mesh import StagePlacement, held_bytes, stage_groups, stage_layout, stage_traffic


class PipelineParallel(JaxStrategy):
    """Stages on devices, one compiled forward and backward each, run in schedule order (an
    interleaved schedule puts `virtual_stages` stages on each device, round robin).

    >>> exp.run(strategy="pipeline", devices=2, schedule="gpipe", micro_batches=4, backend="jax")
    >>> exp.run(strategy="pipeline", devices=8, mesh=(2, 2), schedule="1f1b", micro_batches=4,
    ...         backend="jax")  # 2 stages of 2 × 2
    """

    def __init__(self, spec: Any, devices: list[Any]) -> None:
        super().__init__(spec, devices)
        self.reports: list[StepReport] = []  # the training steps'
        self.alone: list[StepReport] = []  # the passes with one task at a time, after training
        self.stages: list[StageFunctions] = []
        self.curve: Curve | None = None  # the micro-batch curve, where M was chosen from one
        self.choice: Choice | None = None
        self.layout: Layout | None = None  # the stages' tensor-parallel layout, on a mesh

    def describe(self) -> str:
        return "jax.device_put across the cuts (one compiled program per stage pass)"

    def prepare(self, model: keras.Model) -> None:
        """The stages are cut, placed and checked against the memory budget in `train`."""

    def prepare_measurement(self, run: ModelAndBatches) -> None:
        """Nothing to read off the whole model: each stage reports its own figures."""

    def train(self, run: ModelAndBatches, steps_per_epoch: int, recorder: StepRecorder) -> None:
        """Cut the model, place the stages, choose M where asked, then every step of every
        epoch in schedule order; the trained weights end in the user's model."""
        model, batches = run
        recorder.before_timing()  # the curve and balance="time" are timed before the first step
        self.first_batch = batches[0]
        try:
            self._place(model)
            self.reports = train_steps(
                self.runner,
                functools.partial(next, iter(batches[i] for i in itertools.count())),
                self.spec.training.epochs,
                steps_per_epoch,
                recorder,
                first=self.first_batch,
                round_end=self._round_end,
            )
        finally:
            for stage in self.stages:
                stage.copy_back()

    def _round_end(self, reports: list[StepReport]) -> None:
        """A round followed by another in this process: its steps, for its row."""
        self.reports, self.alone = reports, []

    def _place(self, model: keras.Model) -> None:
        """The stages cut and placed, held against the memory budget (their states, then with
        the activations the schedule keeps in flight), M chosen, the runner made."""
        spec, (first_x, first_y) = self.spec, self.first_batch
        traced = self.traced = trace(model)
        feed = _feeder(traced)
        auto = is_auto(spec.micro_batches)
        micro_batches = 1 if auto else spec.micro_batches or 1
        k, chunks = pipeline_stages(spec), spec.virtual_stages
        placements = self._placements(model, k)  # a layout the mesh cannot split: refused here
        sample = split(first_x, micro_batches)[0]  # auto: balanced on the whole batch
        starts = stage_starts(
            traced, k, chunks, spec.balance, lambda: call_times(traced, sample), tensor_bytes
        )
        self.stages = _stages(
            model, traced, starts, placements, micro_batches, spec.recompute, first_y
        )
        self.state_bytes = _state_bytes(self.stages)
        check_budget(stage_memory(self.stages, traced), spec.memory_budget)  # before any timing
        first = candidates(spec.schedule, k, spec.global_batch, chunks)[0]
        split_backward = splits_backward(build_schedule(spec.schedule, k, first, chunks))
        self.curve, self.choice = curve_and_choice(
            spec, self.stages, feed, front, first_x, first_y, split_backward
        )
        if self.choice is not None:
            micro_batches = self.choice.micro_batches
        for stage in self.stages:
            stage.set_micro_batches(micro_batches)
        self.schedule = build_schedule(spec.schedule, k, micro_batches, chunks)
        self.micro_batch = split(first_x, micro_batches)[0]
        memory = stage_memory(self.stages, traced, self.schedule, self.micro_batch)
        check_budget(memory, spec.memory_budget)
        self.runner = ScheduleRunner(self.stages, self.schedule, micro_batches, feed, split)

    def _placements(self, model: keras.Model, k: int) -> list[StagePlacement]:
        """Each device's placement: itself, or a stage's (data, model) sub-mesh and layout."""
        if self.spec.mesh is None:
            return [StagePlacement([device]) for device in self.devices]
        data, tensor = self.spec.mesh
        groups = stage_groups(self.devices, k, data, tensor)
        self.layout = stage_layout(self.spec, model, self.sample, groups[0])
        axes = self.layout.axes_by_path()
        placements = [
            StagePlacement(
                group, data, tensor, axes, stage_activations(model, group, data, tensor, self.split)
            )
            for group in groups
        ]
        if placements[0].activations is not None:
            self.split_fields["activation_layouts"] = placements[0].activations.layouts
        return placements

    def after_training(self, run: ModelAndBatches) -> None:
        """Nothing to read off one compiled step: a pipeline's step is its stages' calls, each
        with its own memory by part (`pipeline_figures.stage_memory`)."""

    def time_tasks_alone(self, run: ModelAndBatches) -> None:
        """Each task alone, a few times, on the first batch (the simulated view), then the
        weights put back: the measurement must not train the model."""
        self.alone = passes_alone(self.runner, *self.first_batch)

    def result_fields(self, run: ModelAndBatches, step_time_s: float | None) -> dict[str, Any]:
        """The schedule's figures from the timed steps (and the passes alone, when measured:
        the simulated view), the stages, and memory by part per device."""
        found = figures(
            self.stages,
            self.traced,
            self.schedule,
            self.reports + self.alone,
            self.spec,
            self.micro_batch,
        )
        # The copies across the cuts inside this run's own timed tasks: never lent by a round.
        comm_time = found.pop("comm_time_s")
        cut_bytes = found["cut_bytes"]
        inside = self._mesh_fields(found)
        found.update(curve_fields(self.spec, self.curve, self.choice, self.alone, cut_bytes))
        return pipeline_row(
            micro_batch_count(self.schedule),
            sum(cut_bytes) + inside if cut_bytes else None,
            comm_time,
            step_time_s,
            {
                **found,
                "stage_tasks": "compiled (jax.jit), backward recomputes forward"
                if self.spec.recompute
                else "compiled (jax.jit), forward keeps its VJP for the backward",
                "state_bytes": self.state_bytes,
                "parameter_bytes": sum(_nbytes(s.trainable) for s in self.stages),
                "memory": stage_memory(self.stages, self.traced, self.schedule, self.micro_batch),
                **({"sequence_split": dict(self.split_fields)} if self.split_fields else {}),
            },
        )

    def _mesh_fields(self, found: dict[str, Any]) -> int:
        """On a mesh: each stage's devices and what its tensor collectives move, the mesh's
        parts named; returns the bytes those collectives move per step (0 without a mesh)."""
        if self.layout is None:
            return 0
        data, tensor = self.spec.mesh
        micro_batches = micro_batch_count(self.schedule)
        total = 0
        for stage, row in zip(self.stages, found["stages"], strict=True):
            moved = stage_traffic(
                self.layout, list(stage.cut.calls), data, self.spec.global_batch, micro_batches
            )
            row.update(devices=stage.placement.names, mesh=f"{data}x{tensor}", **moved)
            total += moved["tensor_all_reduce_bytes"] + moved["data_all_reduce_bytes"]
        found["mesh_axes"] = mesh_label(data=data, tensor=tensor, stages=pipeline_stages(self.spec))
        # A timeline's lane is a schedule's device: here a stage's sub-mesh (plots/timeline.py).
        lanes = len(self.schedule)
        by_lane = {device_of(s.index, lanes): len(s.placement.devices) for s in self.stages}
        found["lane_devices"] = [by_lane[lane] for lane in range(lanes)]
        found["tensor_all_reduce_bytes"] = sum(
            r["tensor_all_reduce_bytes"] for r in found["stages"]
        )
        found["data_all_reduce_bytes"] = sum(r["data_all_reduce_bytes"] for r in found["stages"])
        return total


def _stages(
    model: keras.Model,
    traced: TracedModel,
    starts: list[int],
    placements: list[StagePlacement],
    micro_batches: int,
    recompute: bool,
    y: Any,
) -> list[StageFunctions]:
    """Each slice of the graph with its weights on its device (or sub-mesh) and its own
    optimizer; the last with the model's loss, built on the targets `y`."""
    bounds = [0, *starts, len(traced.graph.calls)]
    count = len(bounds) - 1
    loss = _loss(model, traced, y)
    return [
        StageFunctions(
            index,
            placements[device_of(index, len(placements))],
            traced.graph.stage(bounds[index], bounds[index + 1]),
            traced,
            type(model.optimizer).from_config(model.optimizer.get_config()),
            loss if index == count - 1 else None,
            micro_batches,
            recompute,
        )
        for index in range(count)
    ]


def _loss(model: keras.Model, traced: TracedModel, y: Any):
    """The model's compiled loss (strings, objects, one per output), as the last stage needs it:
    (targets, the values by tensor name) -> the micro-batch's mean loss. Built here on one
    sample of the targets `y`, so its per-output trackers exist before any tracing."""
    config = compile_config(model)
    compiled = compile_loss_class()(
        config.get("loss", model.loss),
        config.get("loss_weights"),
        output_names=getattr(model, "output_names", None),
    )

    def predictions(values: list[Any]) -> Any:
        return keras.tree.pack_sequence_as(traced.outputs, values)

    sinks = [traced.tensors[name] for name in traced.graph.sinks]
    dtype = keras.backend.standardize_dtype
    blank = [np.zeros((1, *(d or 1 for d in t.shape[1:])), dtype(t.dtype)) for t in sinks]
    compiled.build(keras.tree.map_structure(lambda a: np.asarray(a)[:1], y), predictions(blank))

    def loss(y: Any, values: dict[str, Any]) -> Any:
        # The trackers read fresh zeros, not their arrays: a jitted pass captures no constant
        # from another device, and their updates are dropped with the scope.
        fresh = [(v, jax.numpy.zeros(v.shape, v.dtype)) for v in compiled.variables]
        with keras.StatelessScope(state_mapping=fresh):
            return compiled(y, predictions([values[name] for name in traced.graph.sinks]))

    return loss


def _feeder(traced: TracedModel):
    sources = traced.graph.sources

    def feed(x: Any) -> dict[str, Any]:
        given = keras.tree.flatten(x)
        if len(given) != len(sources):
            raise GpkError(
                f"the data gives {len(given)} input tensor(s) but the model takes "
                f"{len(sources)} ({', '.join(sources)}); give x in the structure of the "
                "model's inputs"
            )
        return dict(zip(sources, given, strict=True))

    return feed


def call_times(traced: TracedModel, sample: Any, repeats: int = 3) -> list[float]:
    """Each call's forward and backward time on real values, compiled, the best of a few."""
    values = _feeder(traced)(sample)
    times = []
    for call in traced.graph.calls:
        single = keras.Model(
            [traced.tensors[t] for t in call.inputs], [traced.tensors[t] for t in call.outputs]
        )
        trainable = [v.value for v in single.trainable_variables]
        others = [v.value for v in single.non_trainable_variables]
        args = [values[t] for t in call.inputs]

        def total(trainable, args, single=single, others=others):
            outputs, _ = single.stateless_call(trainable, others, args, training=True)
            return sum(
                jax.numpy.sum(o)
                for o in keras.tree.flatten(outputs)
                if jax.numpy.issubdtype(o.dtype, jax.numpy.floating)
            )

        step = jax.jit(jax.value_and_grad(total))
        best = float("inf")
        for _ in range(repeats + 1):  # the first call compiles
            began = time.perf_counter()
            jax.block_until_ready(step(trainable, args))
            best = min(best, time.perf_counter() - began)
        times.append(best)
        outputs, _ = single.stateless_call(trainable, others, args, training=False)
        values.update(dict(zip(call.outputs, keras.tree.flatten(outputs), strict=True)))
    return times


def _state_bytes(stages: list[StageFunctions]) -> dict[str, int]:
    return held_bytes(
        [a for s in stages for a in (*s.trainable, *s.non_trainable, *s.optimizer_state)]
    )


def _nbytes(values: list[Any]) -> int:
    return sum(int(v.nbytes) for v in values)
