"""The matmul efficiency fitted to the published runs, and each run projected without itself.

Each published run (`published_runs.py`) gives the share of peak that makes the kit's step of
its plan last as long as the paper's (`implied_share`); with its matmuls' shapes on one device
(`analysis/cost_model/matmul_efficiency.py`) that is one point of the fit. `fitted` fits every
run, `leave_one_out` projects each run by a fit made without it; `stacks` fits each software
stack on its own runs and `leave_one_out_by_stack` projects each run by its stack fitted
without it; and `same_shapes` asks, of the
runs whose matmuls have the same shapes, how close one share of peak (the most any efficiency of
the shapes can give them) brings them all to their published steps. The fitted parameters are
kept in `matmul_efficiency.py`, and `tests/planning/test_efficiency_fit.py` re-fits and checks
them.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from ..analysis.cost_model.matmul_efficiency import (
    MatmulEfficiency,
    Measured,
    card_inverse_size,
    fit,
)
from ..analysis.cost_model.parallel_plan_step_time import step_time
from ..analysis.cost_model.roofline import Efficiency
from ..analysis.cost_model.software_stack import (
    STACKS,
    SoftwareStack,
    fit_stacks,
    newest_stack,
)
from . import published_runs
from .published_runs import RUNS, PublishedRun

SOURCE = "the published runs' step times (docs/published-runs.md)"


@dataclass(frozen=True)
class LeftOut:
    """A published run projected by an efficiency fitted without it.

    Args:
        name: the run's name.
        share: the share of peak the fit without it gives its plan.
        implied: the share of peak that reproduces its published step.
        ratio: the kit's throughput over the published one, at `share`.
        stack: the stack whose fit projected it: its own, or, where no other run of its own
            stack is held, the newest of the others.
    """

    name: str
    share: float
    implied: float
    ratio: float
    stack: str = ""


def published_step_s(run: PublishedRun) -> float:
    """The run's published seconds per iteration."""
    flops = published_runs.published_flops(run)
    return flops / (published_runs.published_tflops(run) * 1e12 * run.gpus)


def step_s(run: PublishedRun, efficiency: Efficiency | MatmulEfficiency) -> float:
    """The kit's step of the run's plan at `efficiency`, under its own stack's overlaps."""
    card, cluster = published_runs.card(run), published_runs.cluster(run)
    if isinstance(efficiency, Efficiency):  # one share, whatever the shapes
        flat = MatmulEfficiency(efficiency.likely, 0.0, source=efficiency.source)
        efficiency = replace(cluster.stack, matmul=flat, fp8=flat)
    return step_time(card, published_runs.plan(run), cluster, efficiency).likely


def all_runs() -> tuple[PublishedRun, ...]:
    """The A100 runs, the H100 rows the kit can count (GPT-3 175B, the Llama rows, then
    Megatron-Bridge's, then dgxc's MaxText rows), and the rows of NeMo's long-sequence table
    with their plans, in that order."""
    return (
        RUNS
        + published_runs.h100_runs()
        + published_runs.llama_runs()
        + published_runs.bridge_runs()
        + published_runs.maxtext_runs()
        + published_runs.long_sequence_runs()
    )


def implied_share(run: PublishedRun) -> float:
    """The share of peak at which the kit's step of the run's plan lasts the published step
    (bisection: the step shortens as the share grows)."""
    held = all_runs()
    return _implied_share(held.index(run)) if run in held else _bisect(run)


@functools.cache
def _implied_share(index: int) -> float:
    return _bisect(all_runs()[index])


def _bisect(run: PublishedRun) -> float:
    target = published_step_s(run)
    low, high = 0.01, 1.0
    for _ in range(40):
        middle = (low + high) / 2
        if step_s(run, Efficiency(middle, middle, middle)) > target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def point(run: PublishedRun) -> Measured:
    """The run as a point of the fit: its plan's matmul shapes and its implied share."""
    return Measured(run.name, _shape(run), implied_share(run))


def _shape(run: PublishedRun) -> float:
    """H of the run's plan: its matmuls' weighted inverse size on one device."""
    return card_inverse_size(published_runs.card(run), run.tensor, run.micro_batch_size, run.expert)


def fitted(runs: tuple[PublishedRun, ...] = RUNS) -> MatmulEfficiency:
    """The `MatmulEfficiency` fitted on `runs`."""
    return fit([point(run) for run in runs], SOURCE)


def leave_one_out(runs: tuple[PublishedRun, ...] = RUNS) -> list[LeftOut]:
    """Each run projected by the one efficiency fitted on all the others, whatever their
    software, in the order of `runs`."""
    found = []
    for run in runs:
        others = fitted(tuple(r for r in runs if r is not run))
        share = others.share(point(run).inverse_size)
        ratio = published_step_s(run) / step_s(run, Efficiency(share, share, share))
        found.append(LeftOut(run.name, share, implied_share(run), ratio))
    return found


def stacks(runs: tuple[PublishedRun, ...] | None = None) -> dict[str, SoftwareStack]:
    """The software stacks fitted on `runs` (default: every run held), each on its own runs
    and precision (`software_stack.fit_stacks`: one edge for all, a share of peak each)."""
    points: dict[tuple[str, str], list[Measured]] = {}
    for run in all_runs() if runs is None else runs:
        points.setdefault((run.stack, run.precision), []).append(point(run))
    return fit_stacks(points, STACKS)


def leave_one_out_by_stack(runs: tuple[PublishedRun, ...] | None = None) -> list[LeftOut]:
    """Each run projected by the stacks fitted without it, under its own stack where another
    of its runs at its precision is held (else the newest other stack that has its precision),
    in the order of `runs` (default: every run held)."""
    runs = all_runs() if runs is None else runs
    found = []
    for run in runs:
        others = tuple(r for r in runs if r is not run)
        fitted_stacks = stacks(others)
        if any((r.stack, r.precision) == (run.stack, run.precision) for r in others):
            stack = fitted_stacks[run.stack]
        else:
            stack = newest_stack({r.stack: fitted_stacks[r.stack] for r in others}, run.precision)
        share = stack.matmul_at(run.precision).share(point(run).inverse_size)
        ratio = published_step_s(run) / step_s(run, Efficiency(share, share, share))
        found.append(LeftOut(run.name, share, implied_share(run), ratio, stack.name))
    return found


@dataclass(frozen=True)
class SameShape:
    """Published runs whose matmuls have the same shapes on one GPU, at the one share of peak
    that brings them closest to their published steps.

    Args:
        names: the runs.
        inverse_size: their matmuls' H (`matmul_efficiency.inverse_size`).
        share: the share of peak whose largest miss, as a factor either way, is smallest.
        ratios: each run's kit ÷ published throughput at `share`, in the order of `names`.
    """

    names: tuple[str, ...]
    inverse_size: float
    share: float
    ratios: tuple[float, ...]

    @property
    def spread(self) -> float:
        """The largest ratio over the smallest: how far apart one share leaves the runs."""
        return max(self.ratios) / min(self.ratios)


def same_shapes(runs: tuple[PublishedRun, ...] = RUNS, step: float = 0.001) -> list[SameShape]:
    """Each group of two or more runs with the same matmul shapes, at the share (scanned from
    0.2 to 0.9 in `step`s) whose largest miss is smallest: any efficiency of the shapes gives
    such runs one share, so no such efficiency projects them closer than this."""
    groups: dict[float, list[PublishedRun]] = {}
    for run in runs:
        groups.setdefault(round(_shape(run), 12), []).append(run)
    found = []
    for shape, members in groups.items():
        if len(members) < 2:
            continue
        published = [published_step_s(run) for run in members]
        best: tuple[float, float, tuple[float, ...]] | None = None
        for index in range(round(0.2 / step), round(0.9 / step) + 1):
            share = index * step
            at = Efficiency(share, share, share)
            ratios = tuple(
                seconds / step_s(run, at) for run, seconds in zip(members, published, strict=True)
            )
            miss = max(abs(math.log(ratio)) for ratio in ratios)
            if best is None or miss < best[0]:
                best = (miss, share, ratios)
        assert best is not None
        found.append(SameShape(tuple(r.name for r in members), shape, best[1], best[2]))
    return found
