"""What the kit knows about one strategy, as one frozen record.

Every room asks the record (`strategies.strategy_record(name)`) instead of comparing names, as
matplotlib's `Axes` asks its projection and Keras's `DataParallel` owns its own checks. The
worker class and the projector are named by import path ("module:attribute"), so this room,
which sits under `runs/`, never imports the worker or the cost model above it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .option import Option

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec


@dataclass(frozen=True)
class GridCell:
    """One (strategy, devices) cell of `compare()`'s grid, as a strategy's grid rule sees it."""

    count: int  # devices asked for
    plan: Mapping[str, Any]  # every plan option the comparison was given
    device_kind: Callable[[], str]  # "cpu" or "gpu" for these devices; planned only if asked


def _always(cell: GridCell) -> bool:
    return True


def _no_checks(spec: RunSpec) -> None:
    return None


def _never(spec: RunSpec) -> bool:
    return False


def run_name(spec: RunSpec) -> str:
    """A run's strategy and its devices over every worker, as its row counts them: "data×4"."""
    return f"{spec.strategy}×{spec.replicas}"


@dataclass(frozen=True)
class Strategy:
    """One strategy: its names, where it runs, its options, rules, looks and cost model."""

    name: str  # the name tables, plots and the run log show
    summary: str  # one line for help texts and the guide
    aliases: tuple[str, ...] = ()  # other names accepted everywhere (the seed's "model")
    # backend -> "module:Class" the worker trains with; a backend missing here lacks it
    worker_classes: Mapping[str, str] = field(default_factory=dict)
    # backend -> why that backend lacks it and what to use instead (the end of one sentence)
    missing: Mapping[str, str] = field(default_factory=dict)
    # backends on which it trains with Keras's own `fit` (tune's steps per execution apply)
    fit_on: frozenset[str] = frozenset()
    # whether a run's own loop takes several whole steps in one call, as fit does with
    # steps_per_execution (tune's steps per execution then apply): a one-stage pipeline
    steps_together: Callable[[RunSpec], bool] = _never
    # its own loop trains a comparison's later rounds in the first round's process, as fit
    # does (runs/scheduling/resident_rounds.py)
    rounds_in_process: bool = False
    baseline: bool = False  # the one-device run speedups are measured against
    one_device: bool = False  # runs on exactly one device, without replicas (tune's XLA rule)
    all_reduce: bool = False  # its communication is the gradients' all-reduce between replicas
    measures_comm: bool = False  # training is followed by a communication measurement
    stages: bool = False  # cuts the model into stages: schedule and micro-batches apply
    layout: bool = False  # shards layers over a (data, model) mesh: mesh and layout_map apply
    splits_state: bool = False  # each device holds part of the model's state, not all of it
    processes: bool = False  # several worker processes (a launcher, or a named cluster)
    # backends on which `workers=` spreads it over processes, one mesh over all their devices
    over_processes: frozenset[str] = frozenset()
    runnable: bool = True  # False: a cost-model projection only
    default_mode: str = "fit"  # the loop a run takes unless mode= says otherwise
    color: str = "tab:purple"  # matplotlib colour, the same in every figure
    columns: tuple[str, ...] = ()  # table columns that only this strategy's rows fill
    # the keywords of run(), compare() and plan() it takes, with their defaults and help; the
    # API, RunSpec, `gpk`, `%gpk` and the docs' option tables read them from here
    options: tuple[Option, ...] = ()
    # its options' values as a run holds them, from the values given (a comparison gives every
    # strategy's; each takes its own); by default, each of its options as given
    plan: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    check: Callable[[RunSpec], None] = _no_checks  # its own checks on a whole RunSpec
    in_grid: Callable[[GridCell], bool] = _always  # whether compare() runs it on these devices
    label: Callable[[RunSpec], str] = run_name  # progress rows: "pipeline×2 gpipe M=4"
    projector: str | None = None  # "module:function" that projects it onto other hardware
    # "module:function" that predicts a measured run's step from a calibration of its devices
    predictor: str | None = None
    # the axis of a searched plan it spreads over devices (`plan_axes.py`), and the sharding of
    # that plan's data axis it trains ("none": whole replicas); how a plan's shape is run here
    plan_axis: str | None = None
    plan_sharding: str | None = None

    def __repr__(self) -> str:
        backends = ", ".join(self.worker_classes) or "projection only"
        return f"<Strategy {self.name} ({backends})>"

    def offered_on(self, backend: str) -> bool:
        return backend in self.worker_classes

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def option_names(self) -> tuple[str, ...]:
        return tuple(option.name for option in self.options)

    def settings(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Its options' values as a run holds them, from every option given (by name; a
        missing one takes its default): its own `plan` rule, else each value as given."""
        if self.plan is not None:
            return self.plan(given)
        return {o.name: given.get(o.name, o.default) for o in self.options}
