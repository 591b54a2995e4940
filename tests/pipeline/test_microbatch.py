"""The micro-batch curve and `micro_batches="auto"` on literal curves, in milliseconds."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.pipeline.microbatch import (
    Curve,
    CurvePoint,
    candidates,
    check_micro_batches,
    choose,
    simulated_step,
    sizes,
)
from gpu_parallel_kit.pipeline.schedules import SCHEDULES


def affine_curve(
    stages: int, batch: int, fixed: float, per_sample: float, kinds: str = "FB"
) -> Curve:
    """Each task costs `fixed` plus `per_sample` per sample (B twice F), at every size 1..batch."""
    weight = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}
    return Curve(
        tuple(
            CurvePoint(s, k, n, weight[k] * (fixed + per_sample * n))
            for s in range(stages)
            for k in kinds
            for n in range(1, batch + 1)
            if batch % n == 0
        )
    )


def test_candidates_follow_each_schedules_rules():
    assert candidates("naive", 4, 64) == (1,)
    assert candidates("gpipe", 2, 8) == (1, 2, 4, 8)
    assert candidates("1f1b", 4, 64) == (1, 2, 4, 8, 16, 32)  # at most 8 per device
    assert candidates("interleaved", 2, 8, 2) == (2, 4, 8)
    assert candidates("zb-h1", 2, 12) == (1, 2, 3, 4, 6, 12)
    assert sizes("gpipe", 2, 8) == (8, 4, 2, 1)
    assert sizes("interleaved", 2, 8, 2) == (8, 4, 2, 1)
    with pytest.raises(GpkError, match="multiple of 4"):
        candidates("interleaved", 4, 6, 2)
    with pytest.raises(GpkError, match="schedule='pipedream' is not known"):
        candidates("pipedream", 2, 8)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_auto_is_the_argmin_of_every_valid_m_on_the_same_curve(schedule):
    stages, batch, virtual = 2, 16, 2 if schedule == "interleaved" else 1
    kinds = "FIW" if schedule == "zb-h1" else "FB"
    stage_count = stages * virtual
    # A curve with a fixed cost per task and a cache dip at 4 samples: no closed form says M.
    points = []
    for s in range(stage_count):
        for k in kinds:
            for n in (1, 2, 4, 8, 16):
                seconds = 0.3 + 0.1 * n * (s + 1) - (0.25 if n == 4 else 0.0)
                points.append(CurvePoint(s, k, n, seconds))
    curve = Curve(tuple(points), (100.0,) * (stage_count - 1), 1e-4)
    choice = choose(curve, schedule, stages, batch, virtual)
    valid = candidates(schedule, stages, batch, virtual)
    steps = {m: simulated_step(curve, schedule, stages, m, batch, virtual)[0] for m in valid}
    assert choice.auto and choice.micro_batches == min(valid, key=lambda m: (steps[m], m))
    assert [o.micro_batches for o in choice.options] == list(valid)
    assert all(o.step_s == pytest.approx(steps[o.micro_batches]) for o in choice.options)


def test_per_sample_cost_flat_picks_many_micro_batches_fixed_cost_picks_one():
    flat = affine_curve(4, 64, fixed=0.0, per_sample=1.0)
    assert choose(flat, "gpipe", 4, 64).micro_batches == 32
    fixed = affine_curve(4, 64, fixed=10.0, per_sample=0.01)
    choice = choose(fixed, "gpipe", 4, 64)
    assert choice.micro_batches == 1
    assert choice.reason.startswith("M=1: step on the curve ")
    assert "bubble 0.75" in choice.reason and "M=2 would be 0.60" in choice.reason


def test_the_reason_quotes_bubble_and_per_sample_cost_of_the_choice_and_a_neighbour():
    curve = affine_curve(4, 64, fixed=1.0, per_sample=1.0)
    choice = choose(curve, "gpipe", 4, 64)
    best, next_up = choice.option(choice.micro_batches), None
    ms = [o.micro_batches for o in choice.options]
    next_up = choice.options[ms.index(choice.micro_batches) + 1]
    assert f"bubble {best.bubble:.2f}" in choice.reason
    assert f"{best.per_sample_ratio:.2g}× the whole batch's" in choice.reason
    assert f"M={next_up.micro_batches} would be {next_up.bubble:.2f}" in choice.reason
    assert best.per_sample_ratio > 1.0 and choice.option(1).per_sample_ratio == 1.0


def test_an_explicit_m_wins_and_says_what_auto_would_pick():
    curve = affine_curve(2, 8, fixed=0.0, per_sample=1.0)
    choice = choose(curve, "gpipe", 2, 8, given=2)
    assert (choice.micro_batches, choice.auto, choice.best) == (2, False, 8)
    assert choice.reason.startswith("M=2 as given; auto would choose M=8: ")
    # A user's M beyond auto's range is weighed too.
    wide = affine_curve(1, 64, fixed=0.0, per_sample=1.0)
    assert choose(wide, "gpipe", 1, 64, given=64).option(64).micro_batches == 64


def test_naive_runs_one_micro_batch_whatever_the_curve():
    choice = choose(affine_curve(2, 8, 0.0, 1.0), "naive", 2, 8)
    assert choice.micro_batches == 1 and "runs one micro-batch" in choice.reason


def test_crossing_bytes_lengthen_the_step_by_their_copies():
    points = affine_curve(2, 8, fixed=0.0, per_sample=1.0).points
    free = Curve(points)
    costly = Curve(points, (10.0,), 0.5)  # 5 s per sample over the cut, each way
    # Naive: 8 samples cross down and their gradients back up, nothing overlaps them.
    assert simulated_step(costly, "naive", 2, 1, 8)[0] == pytest.approx(
        simulated_step(free, "naive", 2, 1, 8)[0] + 2 * 8 * 5.0
    )
    # Eight micro-batches hide most copies behind other micro-batches' work.
    gain = simulated_step(costly, "gpipe", 2, 8, 8)[0] - simulated_step(free, "gpipe", 2, 8, 8)[0]
    assert 0 < gain < 2 * 8 * 5.0


def test_curve_interpolates_between_sizes_and_round_trips():
    curve = Curve((CurvePoint(0, "F", 8, 2.0), CurvePoint(0, "F", 2, 0.5)), (3.0,), 0.1, 0.7)
    assert curve.seconds(0, "F", 4) == pytest.approx(1.0)
    assert curve.per_sample(2) == pytest.approx(0.25)
    assert Curve.from_dict(curve.to_dict()) == curve
    with pytest.raises(GpkError, match="no B task for stage 0"):
        curve.seconds(0, "B", 4)
    with pytest.raises(GpkError, match="not usable"):
        CurvePoint(0, "F", 0, 1.0)


def test_micro_batches_is_a_count_or_auto():
    assert check_micro_batches("auto") == "auto" and check_micro_batches("AUTO") == "auto"
    assert check_micro_batches(4) == 4
    with pytest.raises(GpkError, match="micro_batches='four' is not a count; .*'auto'"):
        check_micro_batches("four")
    with pytest.raises(GpkError, match="micro_batches=0 is too few"):
        check_micro_batches(0)
    with pytest.raises(TypeError, match="must be an int"):
        check_micro_batches(2.5)
