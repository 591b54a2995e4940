"""Split a chain of layers into K contiguous stages: the pure solver, on plain numbers.

As in torchgpipe, balancing is two steps: measure a cost per layer (parameters or time, done
where TensorFlow lives, in `worker/tensorflow/pipeline/stages.py`), then solve the split here.
Keeping the solver free of TensorFlow lets it be tested on literal lists in milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from ..errors import GpkError, whole_number


def check_splittable(layers: int, stages: int) -> None:
    """Every stage needs at least one layer."""
    if stages < 1:
        raise GpkError(f"stages={stages} is too few; use devices=1 or more")
    if layers < stages:
        raise GpkError(
            f"the model has {layers} layers, fewer than {stages} stages; "
            f"use devices={layers} or fewer, or strategy='data'"
        )


@dataclass(frozen=True)
class _Split:
    """A split of the first layers into stages, with the key that ranks it against others."""

    costs: tuple[int, ...]  # cost of each stage so far, exact (see `_exact`)
    sizes: tuple[int, ...]  # layers in each stage so far

    def extend(self, cost: int, size: int) -> _Split:
        return _Split((*self.costs, cost), (*self.sizes, size))

    def key(self) -> tuple:
        # Among splits with the smallest costliest stage: the next costliest smallest, and so on
        # (the most even costs); then the most even layer counts; then the earliest boundaries,
        # which keeps early stages light (1f1b makes them hold the most activations).
        return (sorted(self.costs, reverse=True), sorted(self.sizes, reverse=True), self.sizes)


def solve(costs: Sequence[float], stages: int) -> list[int]:
    """Layers per stage for the contiguous split that minimises the costliest stage (exact).

    First the optimal bottleneck, by binary search with a greedy check; then dynamic programming
    over (layers covered, stages used), only through stages within that bottleneck, to break
    ties as `_Split.key` says. Costs become exact integers, so equal sums compare equal.
    """
    values = _checked_costs(costs)
    layers = len(values)
    check_splittable(layers, stages)
    exact = _exact(values)
    prefix = [0, *accumulate(exact)]
    limit = bottleneck(exact, stages)
    best = {0: _Split((), ())}  # by j: the best split of the first j layers into k stages
    for k in range(1, stages + 1):
        # Leave at least one layer for each stage still to come.
        ends = range(k, layers - (stages - k) + 1)
        candidates = {j: _extensions(best, prefix, j, limit) for j in ends}
        best = {j: min(c, key=_Split.key) for j, c in candidates.items() if c}
    return list(best[layers].sizes)


def _extensions(best: dict[int, _Split], prefix: list[int], j: int, limit: int) -> list[_Split]:
    return [
        split.extend(prefix[j] - prefix[i], j - i)
        for i, split in best.items()
        if i < j and prefix[j] - prefix[i] <= limit
    ]


def bottleneck(exact: list[int], stages: int) -> int:
    """The smallest achievable cost of the costliest stage."""
    low, high = max(exact), sum(exact)
    while low < high:
        middle = (low + high) // 2
        if _stages_needed(exact, middle) <= stages:
            high = middle
        else:
            low = middle + 1
    return low


def _stages_needed(exact: list[int], limit: int) -> int:
    # Greedy: fill each stage up to `limit`. With at least as many layers as stages, a split
    # into fewer stages can always be cut further without raising its costliest stage.
    needed, load = 1, 0
    for cost in exact:
        if load + cost > limit:
            needed, load = needed + 1, 0
        load += cost
    return needed


def _exact(values: list[float]) -> list[int]:
    """The costs as integers in one common unit (floats are binary fractions, so this is exact);
    sums then never depend on the order of addition and ties are real ties."""
    ratios = [value.as_integer_ratio() for value in values]
    unit = max(denominator for _, denominator in ratios)
    return [numerator * (unit // denominator) for numerator, denominator in ratios]


def _checked_costs(costs: Sequence[float]) -> list[float]:
    values = [float(c) for c in costs]
    for index, value in enumerate(values):
        if not math.isfinite(value) or value < 0:
            raise GpkError(
                f"layer {index} has cost {value}; give each layer a finite cost of 0 or more"
            )
    return values


def stage_costs(costs: Sequence[float], sizes: Sequence[int]) -> list[float]:
    """The summed cost of each stage of the split `sizes`."""
    _check_sizes(sizes, len(costs))
    starts = [0, *split_points(sizes)]
    return [math.fsum(costs[a : a + n]) for a, n in zip(starts, sizes, strict=True)]


def split_points(sizes: Sequence[int]) -> list[int]:
    """The layer indices where stages 1..K-1 start: the boundaries that give `sizes`."""
    _check_sizes(sizes, sum(sizes))
    return list(accumulate(sizes))[:-1]


def _check_sizes(sizes: Sequence[int], layers: int) -> None:
    for stage, size in enumerate(sizes):
        if size < 1:
            raise GpkError(f"stage {stage} has {size} layers; give every stage 1 layer or more")
    if sum(sizes) != layers:
        raise GpkError(
            f"sizes={list(sizes)} cover {sum(sizes)} layers, not {layers}; "
            f"make them add up to {layers}"
        )


def sizes_from_boundaries(boundaries: Sequence[int], layers: int, stages: int) -> list[int]:
    """Layers per stage from user-given boundaries: the indices where stages 1..K-1 start."""
    check_splittable(layers, stages)
    bounds = list(boundaries)
    if len(bounds) != stages - 1:
        raise GpkError(
            f"boundaries={bounds} give {len(bounds) + 1} stages, not {stages}; list the "
            f"{stages - 1} layer indices where stages 1..{stages - 1} start"
        )
    previous = 0
    for bound in bounds:
        whole_number(bound, "boundary", minimum=None, hint="a layer index")
        if not 1 <= bound <= layers - 1:
            raise GpkError(
                f"boundary {bound} is outside 1..{layers - 1}; each boundary is the index of "
                f"a stage's first layer in a model of {layers} layers"
            )
        if bound <= previous:
            raise GpkError(
                f"boundaries={bounds} do not strictly increase at {bound}; list each stage's "
                "first layer once, in order"
            )
        previous = bound
    return [b - a for a, b in zip([0, *bounds], [*bounds, layers], strict=True)]
