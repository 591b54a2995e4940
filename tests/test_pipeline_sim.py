"""The schedule replay against closed forms: makespan, busy time and bubble fraction."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.pipeline.schedules import Task, build_schedule, format_grid
from gpu_parallel_kit.pipeline.simulation import (
    TimedTask,
    bubble_fraction,
    busy_time,
    makespan,
    simulate,
    theoretical_bubble,
)


def unit(task: Task) -> float:
    return 1.0


def planned(name: str, stages: int, micro_batches: int) -> list[TimedTask]:
    return simulate(build_schedule(name, stages, micro_batches), unit)


def test_gpipe_two_by_two_places_every_task():
    timed = planned("gpipe", 2, 2)
    assert [(str(t), t.start, t.end) for t in timed] == [
        ("0F0", 0.0, 1.0),
        ("0F1", 1.0, 2.0),
        ("1F0", 1.0, 2.0),
        ("1F1", 2.0, 3.0),
        ("1B1", 3.0, 4.0),
        ("0B1", 4.0, 5.0),
        ("1B0", 4.0, 5.0),
        ("0B0", 5.0, 6.0),
    ]
    assert {t.device for t in timed} == {0, 1}
    assert all(t.device == t.stage for t in timed)


def test_format_grid_of_the_planned_chart():
    assert format_grid(planned("gpipe", 2, 2)) == (
        "time  stage 0  stage 1\n"
        "0     0F0\n"
        "1     0F1      1F0\n"
        "2              1F1\n"
        "3              1B1\n"
        "4     0B1      1B0\n"
        "5     0B0"
    )


@pytest.mark.parametrize(("stages", "micro_batches"), [(1, 1), (2, 2), (4, 8), (3, 5), (8, 2)])
def test_gpipe_with_unit_tasks_matches_the_closed_form(stages, micro_batches):
    timed = planned("gpipe", stages, micro_batches)
    assert makespan(timed) == 2 * (micro_batches + stages - 1)
    expected = (stages - 1) / (micro_batches + stages - 1)
    assert bubble_fraction(timed, stages) == pytest.approx(expected, abs=1e-12)
    assert theoretical_bubble(stages, micro_batches) == expected
    assert all(busy_time(timed, s) == 2 * micro_batches for s in range(stages))


def test_naive_on_four_stages_idles_three_quarters_of_the_time():
    timed = planned("naive", 4, 1)
    assert makespan(timed) == 8.0
    assert bubble_fraction(timed, 4) == 0.75


@pytest.mark.parametrize(("stages", "micro_batches"), [(2, 2), (4, 8), (3, 5), (8, 2), (4, 3)])
def test_1f1b_takes_as_long_as_gpipe_with_uniform_tasks(stages, micro_batches):
    def uniform(task: Task) -> float:
        return 1.0 if task.kind == "F" else 2.0

    gpipe = simulate(build_schedule("gpipe", stages, micro_batches), uniform)
    one_f_one_b = simulate(build_schedule("1f1b", stages, micro_batches), uniform)
    assert makespan(one_f_one_b) == makespan(gpipe) == 3 * (micro_batches + stages - 1)


def test_more_micro_batches_shrink_the_bubble():
    bubbles = [bubble_fraction(planned("gpipe", 4, m), 4) for m in (1, 4, 16, 64)]
    assert bubbles == sorted(bubbles, reverse=True)
    assert bubbles[0] == 0.75
    assert bubbles[-1] < 0.05


def test_one_slow_stage_bounds_the_step_below():
    def slow_stage_two(task: Task) -> float:
        return 3.0 if task.stage == 2 else 1.0

    micro_batches = 8
    for name in ("gpipe", "1f1b"):
        timed = simulate(build_schedule(name, 4, micro_batches), slow_stage_two)
        assert makespan(timed) >= micro_batches * (3.0 + 3.0)
        assert busy_time(timed, 2) == micro_batches * 6.0
    # gpipe: stage 2's forwards can only start once stages 0-1 passed micro-batch 0 on, and
    # stage 0 still owes its backwards after stage 2's last one.
    gpipe = simulate(build_schedule("gpipe", 4, micro_batches), slow_stage_two)
    assert makespan(gpipe) == 2 + 48 + 1 + 1 + 2


def test_transfers_add_one_delay_per_crossed_cut():
    schedule = build_schedule("naive", 4, 1)
    timed = simulate(schedule, unit, transfer=0.5)
    # 8 unit tasks in a chain, 3 cuts crossed on the way forward and 3 on the way back.
    assert makespan(timed) == 8 + 6 * 0.5
    per_task = simulate(schedule, unit, transfer=lambda t: 1.0 if t.kind == "F" else 0.0)
    assert makespan(per_task) == 8 + 3


def test_transfer_is_asked_about_the_task_whose_output_is_sent():
    sent = []

    def record(task: Task) -> float:
        sent.append(str(task))
        return 0.0

    simulate(build_schedule("naive", 2, 1), unit, transfer=record)
    assert sent == ["0F0", "1B0"]


def test_a_single_stage_has_no_bubble():
    timed = planned("gpipe", 1, 6)
    assert makespan(timed) == 12.0
    assert bubble_fraction(timed, 1) == 0.0
    assert theoretical_bubble(1, 6) == 0.0


def test_measured_durations_are_replayed_exactly():
    durations = {"0F0": 0.25, "1F0": 0.5, "1B0": 1.0, "0B0": 0.75}
    timed = simulate(build_schedule("naive", 2, 1), lambda t: durations[str(t)])
    assert [(str(t), t.start, t.end) for t in timed] == [
        ("0F0", 0.0, 0.25),
        ("1F0", 0.25, 0.75),
        ("1B0", 0.75, 1.75),
        ("0B0", 1.75, 2.5),
    ]
    assert busy_time(timed, 1) == 1.5
    assert bubble_fraction(timed, 2) == pytest.approx(1 - 2.5 / 5.0)


def test_a_stage_that_ran_nothing_counts_as_idle():
    timed = planned("naive", 2, 1)
    assert bubble_fraction(timed, 2) == 0.5
    assert bubble_fraction(timed, 4) == 0.75


def test_empty_timelines_and_bad_numbers():
    assert makespan([]) == 0.0
    assert bubble_fraction([], 3) == 0.0
    with pytest.raises(GpkError, match=r"duration for task 0F0 is -1\.0; give a finite number"):
        simulate(build_schedule("naive", 1, 1), lambda t: -1.0)
    with pytest.raises(GpkError, match="transfer for task 0F0 is nan"):
        simulate(build_schedule("naive", 2, 1), unit, transfer=float("nan"))
    with pytest.raises(GpkError, match="stages=0 is too few"):
        theoretical_bubble(0, 4)
    with pytest.raises(GpkError, match="ends at 1 before it starts at 2"):
        TimedTask(0, "F", 0, start=2, end=1)


def test_an_invalid_schedule_is_refused_with_its_grid():
    schedule = (
        (Task(0, "F", 0), Task(0, "B", 0), Task(0, "F", 1), Task(0, "B", 1)),
        (Task(1, "F", 1), Task(1, "F", 0), Task(1, "B", 0), Task(1, "B", 1)),
    )
    with pytest.raises(ValueError, match=r"deadlocks[\s\S]*step  stage 0  stage 1"):
        simulate(schedule, unit)
