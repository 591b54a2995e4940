"""`pipeline` on JAX over several processes: each stage in the process that owns its device,
the cuts between processes crossed as collectives (`process_crossing.py`).

Every process cuts the model the same way (balance by parameters, positions or names: nothing
timed decides it), feeds the whole batch (the first stage needs the inputs, the last the
targets) and runs its own devices' task lists. A stage of another process is built here only
long enough to be cut and timed for the micro-batch curve, on a local device, then kept as a
record of where it lives. After training, each weight is taken from the process that trained it.

>>> exp.run("pipeline", devices=1, workers=2, schedule="1f1b", micro_batches=4, backend="jax")
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import jax
import keras
import numpy as np
from jax.experimental import multihost_utils

from ....errors import GpkError
from ....pipeline.schedules import micro_batch_count
from ...pipeline.runner_messages import StepReport
from ...pipeline.schedule_runner import ScheduleRunner
from ...strategy_hooks import ModelAndBatches
from ..device_setup import device_names
from .pipeline_strategy import PipelineParallel, _state_bytes
from .process_crossing import ProcessCrossings
from .stage_calls import split
from .stage_mesh import StagePlacement


def for_processes(strategy: Any, local_devices: list[Any]) -> Any:
    """The strategy as one of several processes trains it: a pipeline's stages in the
    processes of their devices; any other strategy as it is (one mesh over all)."""
    if isinstance(strategy, PipelineParallel):
        return ProcessPipeline(strategy.spec, strategy.devices, local_devices)
    return strategy


class ProcessPipeline(PipelineParallel):
    """A pipeline whose stages are spread over processes, one process's share run here.

    Args:
        spec: the run.
        devices: every process's devices, in process order (stage s on device s, or on its
            sub-mesh's first device).
        local_devices: this process's.
    """

    def __init__(self, spec: Any, devices: list[Any], local_devices: list[Any]) -> None:
        super().__init__(spec, devices)
        self.local = list(local_devices)

    def describe(self) -> str:
        return (
            "jax.device_put across the cuts inside a process; a jax.lax.ppermute collective "
            "across those between processes (one compiled program per stage pass)"
        )

    def _placements(self, model: keras.Model, k: int) -> list[Any]:
        """A stage of another process placed on a local device while the model is cut and the
        curve timed; a stage whose devices span processes refused."""
        placements = super()._placements(model, k)
        local = self.local[0]
        kept = []
        for placement in placements:
            owners = {d.process_index for d in placement.devices}
            if len(owners) > 1:
                raise GpkError(
                    f"a stage's devices {device_names(placement.devices)} span processes; give "
                    "each process a whole number of stages (devices= a multiple of data × model)"
                )
            here = placement.device in self.local
            kept.append(placement if here else StandIn(placement, local))
        return kept

    def _place(self, model: keras.Model) -> None:
        """As on one process; then the other processes' stages become records of where they
        live, and the runner crosses their cuts."""
        super()._place(model)
        self.runner.close()
        self.stages = [
            s if not isinstance(s.placement, StandIn) else RemoteStage(s) for s in self.stages
        ]
        self.state_bytes = _state_bytes(self.stages)
        rows = int(np.shape(jax.tree.leaves(self.micro_batch)[0])[0])
        crossings = ProcessCrossings(self.stages, self.schedule, self.traced, rows)
        self.runner = ScheduleRunner(
            self.stages,
            self.schedule,
            micro_batch_count(self.schedule),
            self.runner.feed,
            split,
            crossings,
        )

    def gathered_weights(self, model: keras.Model) -> list[np.ndarray]:
        """Every weight as the process of its stage trained it, in every process (one
        all-gather), put in this process's model too."""
        owner = {id(v): s.device.process_index for s in self.stages for v in s.variables}
        values = [np.asarray(v.value) for v in model.weights]
        everyone = multihost_utils.process_allgather(values)
        gathered = [
            np.asarray(stacked[owner.get(id(v), 0)])
            for v, stacked in zip(model.weights, everyone, strict=True)
        ]
        for variable, value in zip(model.weights, gathered, strict=True):
            variable.assign(value)
        return gathered

    def result_fields(self, run: ModelAndBatches, step_time_s: Any) -> dict:
        """As on one process, from every process's tasks (each timed on its own clock from
        its step's start: the steps begin together, held by their crossings)."""
        self.reports = _merged(self.reports)
        self.alone = _merged(self.alone)
        fields = super().result_fields(run, step_time_s)
        fields["extra"]["stage_processes"] = [s.device.process_index for s in self.stages]
        return fields


def _merged(reports: list[StepReport]) -> list[StepReport]:
    """Each step's report with every process's tasks, bytes and live micro-batches (two
    all-gathers of the pickled reports, which differ in length)."""
    mine = np.frombuffer(pickle.dumps(reports), dtype=np.uint8)
    lengths = multihost_utils.process_allgather(np.int64(mine.size))
    padded = np.zeros(int(np.max(lengths)), np.uint8)
    padded[: mine.size] = mine
    everyone = multihost_utils.process_allgather(padded)
    each = [pickle.loads(row[:n].tobytes()) for row, n in zip(everyone, lengths, strict=True)]
    return [
        dataclasses.replace(
            parts[0],
            tasks=[t for p in parts for t in p.tasks],
            cut_bytes=[sum(b) for b in zip(*(p.cut_bytes for p in parts), strict=True)],
            peak_live=[max(b) for b in zip(*(p.peak_live for p in parts), strict=True)],
            update_s=[u for p in parts for u in p.update_s],
        )
        for parts in zip(*each, strict=True)
    ]


class StandIn(StagePlacement):
    """Where a stage of another process is placed while this process cuts and times the
    model: a local device, under the name of the stage's own (`owner`)."""

    def __init__(self, owner: StagePlacement, local: Any) -> None:
        super().__init__([local])
        self.owner = owner

    @property
    def names(self) -> list[str]:
        return self.owner.names


class RemoteStage:
    """A stage another process trains: its place in the model and where it lives, no arrays."""

    fuses = True  # as `StageFunctions`: the schedule's fused calls are the same everywhere
    runs_ahead = True

    def __init__(self, stage: Any) -> None:
        self.index, self.cut, self.loss_fn = stage.index, stage.cut, stage.loss_fn
        self.floating, self.variables = stage.floating, stage.variables
        self.placement = stage.placement.owner
        self.device = self.placement.device
        self.micro_batches = stage.micro_batches
        self.trainable: list[Any] = []
        self.non_trainable: list[Any] = []
        self.optimizer_state: list[Any] = []
        self.accumulated: list[Any] = []

    def set_micro_batches(self, micro_batches: int) -> None:
        self.micro_batches = micro_batches

    def snapshot(self) -> None:
        """Nothing here to put back: its state lives in its own process."""

    def restore(self, state: None) -> None:
        pass

    def copy_back(self) -> None:
        """Its weights come from its own process (`ProcessPipeline.gathered_weights`)."""
