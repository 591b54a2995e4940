"""A searched plan's shape run here, scaled down: `Experiment.run_plan` and `compare_plans`.

Each plan is mapped to a strategy, devices and options (`scaled_plan.py`) and every refusal said
before the first run; the model, a keras-hub backbone, is rebuilt with fewer blocks in the
worker (`worker/depth_scaled_model.py`), its depth read first in a short child. Each row keeps
the plan's fields as they ran and what was scaled in its `extra`, logged with it, so the
`Comparison` it comes back in and `gpk.history()` both show them
(`analysis/tables/plan_columns.with_ran_plans`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

import pandas as pd

from ..comparison import Comparison
from ..errors import GpkError, whole_number
from ..runs.description.device_choice import discover_physical_devices, virtual_device_limit
from ..runs.description.pickled_functions import pickled
from ..runs.description.sources import ModelSource
from ..runs.processes.child_process import RunInterrupted, start_child, stop_child
from ..strategies import resolve
from ..strategies.plan_axes import RAN_PLAN, SCALED
from .scaled_plan import ScaledPlan, scale_plan

# The worker's loader of a model at another depth, named as text: the caller never imports it.
LOAD_WITH_BLOCKS = "gpu_parallel_kit.worker.depth_scaled_model:load_with_blocks"
MODEL_DEPTH_ENTRY = "gpu_parallel_kit.worker.depth_scaled_model:model_depth"
DEPTH_TIMEOUT_S = 300.0  # a model built with its weights deferred: seconds, even a large one
_DEPTHS: dict[ModelSource, tuple[int | None, int | None]] = {}  # this process's reads


class PlanRuns:
    """`Experiment`'s runs of searched plans (`gpk.search`'s `Plans`), scaled down to here."""

    def run_plan(
        self,
        plan: Any,
        devices: int | None = None,
        *,
        blocks: int | None = None,
        cancel: threading.Event | None = None,
        **options: Any,
    ) -> Comparison:
        """Run one searched plan's shape here, scaled down: the same tensor and stages where the
        devices allow, fewer replicas, a keras-hub backbone rebuilt with fewer blocks.

        Args:
            plan: `plans.best`, a row of `plans.table` or a mapping of a plan's fields.
            devices: the devices here the plan may take; default every device this machine
                offers (its GPUs, else `GPK_MAX_VIRTUAL` virtual devices).
            blocks: the blocks to rebuild the model with; default the fewest its stages take.
            cancel: an event that stops the run.
            **options: `run()`'s other keywords (`measure_comm`, `tune`, ...).

        Returns:
            A `Comparison` of one row; its table's `data`, `tensor` and `stages` are the shape
            that ran, and `scaled` says what changed, e.g. "data 64 -> 2; blocks 40 -> 2".
        """
        rows = plan_rows(plan)
        if len(rows) > 1:
            raise GpkError(
                f"run_plan runs one plan and was given {len(rows)}; pick one, e.g. "
                "plans.top(3).iloc[0], or run them all with exp.compare_plans(...)"
            )
        return self.compare_plans(rows, devices, blocks=blocks, cancel=cancel, **options)

    def compare_plans(
        self,
        plans: Any,
        devices: int | None = None,
        *,
        blocks: int | None = None,
        cancel: threading.Event | None = None,
        **options: Any,
    ) -> Comparison:
        """Run several searched plans' shapes here, one after another, as `run_plan` runs one;
        every plan is checked, and refused in one sentence, before the first runs.

        Args:
            plans: `plans.top(3)` (a DataFrame of `Plans.table` rows), or a list of plans.
            devices: as `run_plan` takes them.
            blocks: as `run_plan` takes them.
            cancel: an event that stops the run in hand and those after it; the rows of
                those that ran are in `gpk.history()`.
            **options: `run()`'s other keywords.

        Returns:
            A `Comparison`, one row per plan, as `run_plan` gives one.
        """
        rows = plan_rows(plans)
        here = devices_here(self.backend) if devices is None else whole_number(devices, "devices")
        batch = self.training.batch_size
        for row in rows:  # what no backend runs is refused before the model is read
            scale_plan(row, here, batch, self.backend)
        depth, heads = self._model_depth()
        shapes = [scale_plan(r, here, batch, self.backend, depth, heads, blocks) for r in rows]
        specs = [self._plan_spec(shape, options) for shape in shapes]
        results = []
        for shape, spec in zip(shapes, specs, strict=True):
            ran = {RAN_PLAN: {**shape.shape, SCALED: shape.said}}  # logged with the row
            try:
                results.append(self._execute(spec, cancel, extra=ran))
            except RunInterrupted as interrupted:
                raise KeyboardInterrupt(
                    "run cancelled; its row is in gpk.history()"
                ) from interrupted
        return Comparison(results, counter=self.counted_step)

    def _plan_spec(self, shape: ScaledPlan, options: Mapping[str, Any]) -> Any:
        given = {**shape.options, **options}
        spec = self.plan(
            shape.strategy, shape.devices, backend=shape.backend, scaling="strong", **given
        )
        if shape.blocks is None:
            return spec
        return dataclasses.replace(spec, model=depth_scaled(self.model, shape.blocks))

    def _model_depth(self) -> tuple[int | None, int | None]:
        """The blocks of the experiment's model when the worker can rebuild it with fewer, and
        its heads: read in a short child, once per model."""
        if self.model not in _DEPTHS:
            _DEPTHS[self.model] = read_depth(self.model, self.backend)
        return _DEPTHS[self.model]


@dataclasses.dataclass(frozen=True)
class DepthScaled:
    """A model builder for the worker: the experiment's model rebuilt with `blocks` blocks."""

    source: ModelSource
    blocks: int

    def __call__(self) -> Any:
        return resolve(LOAD_WITH_BLOCKS)(self.source, self.blocks)


def depth_scaled(source: ModelSource, blocks: int) -> ModelSource:
    """`source` as a builder of the same model with `blocks` blocks."""
    name = f"{source.name} ({blocks} blocks)"
    return ModelSource(kind="builder", name=name, payload=pickled(DepthScaled(source, blocks),
                       "model builder", name))  # fmt: skip


def plan_rows(plans: Any) -> list[Any]:
    """The plans given: one (`plans.best`, a row, a mapping), a DataFrame's rows, or a list."""
    if isinstance(plans, pd.DataFrame):
        found = [row for _, row in plans.iterrows()]
    elif _is_plan(plans):
        found = [plans]
    elif isinstance(plans, list | tuple):
        found = [row for each in plans for row in plan_rows(each)]
    else:
        raise GpkError(
            f"plans={type(plans).__name__} is not a plan; give plans.best, plans.top(3) or a "
            "list of rows of plans.table"
        )
    if not found:
        raise GpkError("no plan to run: the table given is empty; give plans.top(3)")
    return found


def _is_plan(value: Any) -> bool:
    """One plan: a `RankedPlan`, a row of `Plans.table` or a mapping of its fields."""
    return isinstance(value, pd.Series | Mapping) or hasattr(value, "row")


def read_depth(source: ModelSource, backend: str) -> tuple[int | None, int | None]:
    """(blocks, heads) a model's config says, read in a child that builds it with its weights
    deferred; (None, None) when the child cannot tell."""
    process, receiver = start_child(MODEL_DEPTH_ENTRY, source, backend=backend)
    try:
        if not receiver.poll(DEPTH_TIMEOUT_S):
            return None, None
        succeeded, found = receiver.recv()
    except EOFError:
        return None, None
    finally:
        receiver.close()
        stop_child(process)
    return (found["depth"], found["heads"]) if succeeded else (None, None)


def devices_here(backend: str) -> int:
    """Every device this machine offers a run: its GPUs, else the virtual devices' limit."""
    gpus = [d for d in discover_physical_devices(backend) if d.kind == "gpu"]
    return len(gpus) or virtual_device_limit()
