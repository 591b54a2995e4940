"""`PlanRuns`, behind `Experiment.run_plan` and `compare_plans`: a searched plan's shape run
here, scaled down, its rows a `Comparison` that says what was scaled.

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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

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

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec
    from ..runs.results.run_result import RunResult

# The worker's loader of a model at another depth, named as text: the caller never imports it.
LOAD_WITH_BLOCKS = "gpu_parallel_kit.worker.depth_scaled_model:load_with_blocks"
MODEL_DEPTH_ENTRY = "gpu_parallel_kit.worker.depth_scaled_model:model_depth"
DEPTH_TIMEOUT_S = 300.0  # a model built with its weights deferred: seconds, even a large one
_DEPTHS: dict[ModelSource, tuple[int | None, int | None]] = {}  # this process's reads


@dataclasses.dataclass(frozen=True)
class PlanRuns:
    """One experiment's runs of searched plans' shapes (`gpk.search`'s `Plans`), scaled down.

    Each `Experiment` holds one, built from its model, backend and batch and the hooks that
    validate, run and log one run; its `run_plan` and `compare_plans` hand their calls to it.
    """

    model: ModelSource  # the experiment's; a keras-hub backbone is rebuilt with fewer blocks
    backend: str  # the experiment's; a strategy it lacks runs on one that has it
    batch_size: int  # the experiment's global batch, which each plan's is scaled down to
    run_spec: Callable[..., RunSpec] = dataclasses.field(repr=False)  # `Experiment.plan`
    # Runs one spec, shows its progress and logs its row: `(spec, cancel, extra=...)`.
    execute: Callable[..., RunResult] = dataclasses.field(repr=False)
    # The experiment's counted step, for the projections of the comparison it returns.
    counter: Callable[[str], Any] = dataclasses.field(repr=False)

    def run_plan(
        self,
        plan: Any,
        devices: int | None = None,
        *,
        blocks: int | None = None,
        cancel: threading.Event | None = None,
        **options: Any,
    ) -> Comparison:
        """One searched plan's shape run here, scaled down; see `Experiment.run_plan`."""
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
        """Several searched plans' shapes run here, one after another, every one checked before
        the first runs; see `Experiment.compare_plans`."""
        rows = plan_rows(plans)
        here = devices_here(self.backend) if devices is None else whole_number(devices, "devices")
        batch = self.batch_size
        for row in rows:  # what no backend runs is refused before the model is read
            scale_plan(row, here, batch, self.backend)
        depth, heads = self._model_depth()
        shapes = [scale_plan(r, here, batch, self.backend, depth, heads, blocks) for r in rows]
        specs = [self._spec(shape, options) for shape in shapes]
        results = []
        for shape, spec in zip(shapes, specs, strict=True):
            ran = {RAN_PLAN: {**shape.shape, SCALED: shape.said}}  # logged with the row
            try:
                results.append(self.execute(spec, cancel, extra=ran))
            except RunInterrupted as interrupted:
                raise KeyboardInterrupt(
                    "run cancelled; its row is in gpk.history()"
                ) from interrupted
        return Comparison(results, counter=self.counter)

    def _spec(self, shape: ScaledPlan, options: Mapping[str, Any]) -> RunSpec:
        given = {**shape.options, **options}
        spec = self.run_spec(
            shape.strategy, shape.devices, backend=shape.backend, scaling="strong", **given
        )
        if shape.blocks is None:
            return spec
        return dataclasses.replace(spec, model=depth_scaled(self.model, shape.blocks))

    def _model_depth(self) -> ModelDepth:
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
    payload = pickled(DepthScaled(source, blocks), "model builder", name)
    return ModelSource(kind="builder", name=name, payload=payload)


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


class ModelDepth(NamedTuple):
    """What a model's config says of its depth; None where it cannot tell."""

    blocks: int | None  # the repeated blocks a builder can make fewer of
    heads: int | None  # attention heads per block


def read_depth(source: ModelSource, backend: str) -> ModelDepth:
    """(blocks, heads) a model's config says, read in a child that builds it with its weights
    deferred; (None, None) when the child cannot tell."""
    unknown = ModelDepth(None, None)
    process, receiver = start_child(MODEL_DEPTH_ENTRY, source, backend=backend)
    try:
        if not receiver.poll(DEPTH_TIMEOUT_S):
            return unknown
        succeeded, found = receiver.recv()
    except EOFError:
        return unknown
    finally:
        receiver.close()
        stop_child(process)
    return ModelDepth(found["depth"], found["heads"]) if succeeded else unknown


def devices_here(backend: str) -> int:
    """Every device this machine offers a run: its GPUs, else the virtual devices' limit."""
    gpus = [d for d in discover_physical_devices(backend) if d.kind == "gpu"]
    return len(gpus) or virtual_device_limit()
