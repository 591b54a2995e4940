"""The runs a comparison asks for: every strategy on every device count, on each backend.

Each backend gets its own `single` baseline, a strategy a backend does not offer is left out with
a note, and a strategy's own record decides which device counts it takes (`in_grid`). Every run
is planned by the Experiment's `plan`, so the whole grid is validated before the first starts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ...errors import GpkError
from ...strategies import GridCell, check_backend, strategy_record
from ...strategies.processes import for_comparison
from ..description.device_choice import plan_devices
from ..description.run_spec import RunSpec, check_strategy
from .servers_ahead import warm

PlanOne = Callable[..., RunSpec]  # Experiment.plan: (strategy, devices, **options) -> RunSpec


def plan_comparison(
    plan_one: PlanOne,
    default_backend: str,
    strategies: Sequence[str],
    devices: Sequence[int | Sequence[int]],
    options: dict[str, Any],
) -> list[RunSpec]:
    """The grid on each asked backend (`options["backend"]`: one name or several; default the
    experiment's), each with its own baseline."""
    options = dict(options)
    backends = options.pop("backend", None) or default_backend
    if isinstance(backends, str):
        backends = [backends]
    if isinstance(strategies, str):
        strategies = [strategies]
    for backend in backends:
        check_backend(backend, "single")
        warm(backend)
    for strategy in strategies:
        check_strategy(strategy)
        if not any(strategy_record(strategy).offered_on(b) for b in backends):
            check_backend(backends[0], strategy)  # offered nowhere: refused in one sentence
    specs = []
    for backend in backends:
        offered = [s for s in strategies if strategy_record(s).offered_on(backend)]
        for left_out in (strategy_record(s) for s in strategies if s not in offered):
            # A note, not a warning: on stdout, so a notebook shows no red box for it.
            print(f"{backend}: {left_out.name} left out ({left_out.missing[backend]})")
        if offered:
            specs.extend(plan_grid(plan_one, offered, devices, {**options, "backend": backend}))
    return specs


def plan_grid(
    plan_one: PlanOne,
    strategies: Sequence[str],
    devices: Sequence[int | Sequence[int]],
    options: dict[str, Any],
) -> list[RunSpec]:
    """One backend's grid (`options["backend"]`), with the baseline added when asked for though
    no device count in the grid was 1."""
    if isinstance(strategies, str):
        strategies = [strategies]
    if isinstance(devices, int):
        devices = [devices]
    if not strategies or not devices:
        raise GpkError("compare() needs at least one strategy and one device count")
    backend = options["backend"]
    specs = []
    for strategy in strategies:
        record = strategy_record(strategy)
        for choice in devices:
            count = choice if isinstance(choice, int) else len(choice)
            kind = functools.partial(_device_kind, choice, backend)
            if record.in_grid(GridCell(count, options, kind)):
                # workers= and cluster= go to the strategies that always run in processes
                specs.append(plan_one(strategy, choice, **for_comparison(record, options)))
    if any(strategy_record(s.strategy).baseline for s in specs):
        return specs
    baseline = next((s for s in strategies if strategy_record(s).baseline), None)
    if baseline is not None:
        specs.insert(0, plan_one(baseline, 1, **for_comparison(strategy_record(baseline), options)))
    return specs


def _device_kind(devices: int | Sequence[int], backend: str) -> str:
    return plan_devices(devices, backend=backend).kind
