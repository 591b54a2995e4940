"""The contiguous-split solver on literal cases, against brute force, and its input checks."""

from __future__ import annotations

import itertools
import random

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.pipeline.partition import (
    check_splittable,
    sizes_from_boundaries,
    solve,
    split_points,
    stage_costs,
)


def test_solve_literal_cases():
    assert solve([1, 2, 3, 4, 5, 6], 2) == [4, 2]
    assert solve([1] * 8, 4) == [2, 2, 2, 2]
    assert solve([10, 1, 1, 1], 2) == [1, 3]
    assert solve([1, 1, 1, 1, 1, 10], 3) == [2, 3, 1]
    assert solve([5], 1) == [1]
    assert solve([3, 1, 2], 3) == [1, 1, 1]


def test_ties_go_to_the_more_even_then_the_earlier_split():
    # Every split of [5, 1, 1, 5] into 3 has a stage of 5; [1, 2, 1] is the most even.
    assert solve([5, 1, 1, 5], 3) == [1, 2, 1]
    # [1, 2] and [2, 1] are equally even; the earlier boundary wins.
    assert solve([1, 1, 1], 2) == [1, 2]
    # Zero costs tie everything: even layer counts decide.
    assert solve([0, 0, 0, 0], 2) == [2, 2]
    assert solve([1] * 10, 4) == [2, 2, 3, 3]


def test_float_costs_are_summed_exactly():
    # 0.1 + 0.2 is a little more than 0.3 in binary floating point.
    assert solve([0.1, 0.2, 0.3], 2) == [2, 1]
    assert stage_costs([0.1, 0.2, 0.3], [2, 1]) == [0.30000000000000004, 0.3]


def _brute_force(costs: list[int], stages: int) -> list[int]:
    layers = len(costs)
    best = None
    for cut in itertools.combinations(range(1, layers), stages - 1):
        bounds = [0, *cut, layers]
        sizes = [b - a for a, b in itertools.pairwise(bounds)]
        sums = [sum(costs[a:b]) for a, b in itertools.pairwise(bounds)]
        key = (sorted(sums, reverse=True), sorted(sizes, reverse=True), sizes)
        if best is None or key < best[0]:
            best = (key, sizes)
    return best[1]


@pytest.mark.parametrize("seed", range(40))
def test_solve_agrees_with_brute_force(seed):
    rng = random.Random(seed)
    layers = rng.randint(1, 10)
    stages = rng.randint(1, layers)
    costs = [rng.randint(0, 6) for _ in range(layers)]
    sizes = solve(costs, stages)
    assert sizes == _brute_force(costs, stages), (costs, stages)
    assert max(stage_costs(costs, sizes)) == min(
        max(stage_costs(costs, other))
        for other in [
            [b - a for a, b in itertools.pairwise([0, *cut, layers])]
            for cut in itertools.combinations(range(1, layers), stages - 1)
        ]
    )


def test_a_large_model_solves_quickly_and_evenly():
    costs = [1.0] * 240
    assert solve(costs, 8) == [30] * 8


def test_solve_rejects_bad_costs_and_too_few_layers():
    with pytest.raises(GpkError, match="layer 1 has cost -2.0; give each layer a finite cost"):
        solve([1, -2, 3], 2)
    with pytest.raises(GpkError, match="layer 0 has cost inf"):
        solve([float("inf"), 1], 2)
    with pytest.raises(GpkError, match="the model has 2 layers, fewer than 3 stages"):
        solve([1, 2], 3)
    with pytest.raises(GpkError, match="the model has 0 layers"):
        solve([], 1)


def test_check_splittable_says_how_many_devices_fit():
    with pytest.raises(
        GpkError,
        match=r"^the model has 3 layers, fewer than 4 stages; "
        r"use devices=3 or fewer, or strategy='data'$",
    ):
        check_splittable(3, 4)
    with pytest.raises(GpkError, match="stages=0 is too few"):
        check_splittable(3, 0)
    check_splittable(4, 4)


def test_split_points_and_stage_costs():
    assert split_points([4, 2]) == [4]
    assert split_points([2, 2, 2, 2]) == [2, 4, 6]
    assert split_points([7]) == []
    assert stage_costs([1, 2, 3, 4, 5, 6], [4, 2]) == [10.0, 11.0]
    with pytest.raises(GpkError, match=r"stage 1 has 0 layers; give every stage 1 layer or more"):
        split_points([3, 0, 2])
    with pytest.raises(GpkError, match=r"sizes=\[2, 2\] cover 4 layers, not 6"):
        stage_costs([1] * 6, [2, 2])


def test_sizes_from_boundaries_inverts_split_points():
    assert sizes_from_boundaries([4], layers=6, stages=2) == [4, 2]
    assert sizes_from_boundaries([1, 3, 6], layers=8, stages=4) == [1, 2, 3, 2]
    assert sizes_from_boundaries([], layers=5, stages=1) == [5]
    for sizes in ([1, 2, 3, 2], [5, 1], [1, 1, 1]):
        bounds = split_points(sizes)
        assert sizes_from_boundaries(bounds, sum(sizes), len(sizes)) == sizes


@pytest.mark.parametrize(
    ("boundaries", "message"),
    [
        ([2], r"^boundaries=\[2\] give 2 stages, not 3; list the 2 layer indices where stages "),
        ([2, 2], r"^boundaries=\[2, 2\] do not strictly increase at 2; list each stage's first"),
        ([4, 2], r"^boundaries=\[4, 2\] do not strictly increase at 2"),
        ([0, 3], r"^boundary 0 is outside 1\.\.5; each boundary is the index"),
        ([2, 6], r"^boundary 6 is outside 1\.\.5"),
    ],
)
def test_bad_boundaries_are_named_with_the_fix(boundaries, message):
    with pytest.raises(GpkError, match=message):
        sizes_from_boundaries(boundaries, layers=6, stages=3)


def test_boundaries_must_be_ints():
    with pytest.raises(TypeError, match=r"boundary must be an int, not float \(boundary=2\.5\)"):
        sizes_from_boundaries([2.5], layers=6, stages=2)
