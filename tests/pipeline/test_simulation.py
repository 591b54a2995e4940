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
from tests.pipeline.text_tables import grid_cells


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
    assert grid_cells(format_grid(planned("gpipe", 2, 2))) == [
        ["time", "stage 0", "stage 1"],
        ["0", "0F0", ""],
        ["1", "0F1", "1F0"],
        ["2", "", "1F1"],
        ["3", "", "1B1"],
        ["4", "0B1", "1B0"],
        ["5", "0B0", ""],
    ]


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


def test_zb_h1_two_by_two_places_every_task():
    timed = planned("zb-h1", 2, 2)
    assert [(str(t), t.start, t.end) for t in timed] == [
        ("0F0", 0.0, 1.0),
        ("0F1", 1.0, 2.0),
        ("1F0", 1.0, 2.0),
        ("1I0", 2.0, 3.0),
        ("0I0", 3.0, 4.0),  # the input gradient came up without waiting for 1W0
        ("1F1", 3.0, 4.0),
        ("0W0", 4.0, 5.0),
        ("1I1", 4.0, 5.0),
        ("0I1", 5.0, 6.0),
        ("1W0", 5.0, 6.0),  # deferred on the last stage into the time it would idle
        ("0W1", 6.0, 7.0),
        ("1W1", 6.0, 7.0),
    ]
    assert all(t.device == t.stage for t in timed)


@pytest.mark.parametrize(("stages", "micro_batches"), [(2, 2), (4, 4), (4, 8), (3, 5), (8, 16)])
def test_zb_h1_with_unit_passes_has_a_third_of_1f1bs_bubble(stages, micro_batches):
    # F = B = W = 1, so 1f1b's whole backward is B + W = 2.
    zb_h1 = planned("zb-h1", stages, micro_batches)
    assert makespan(zb_h1) == 3 * micro_batches + stages - 1
    expected = (stages - 1) / (3 * micro_batches + stages - 1)  # the paper's (K-1)/(3M) of ideal
    assert bubble_fraction(zb_h1, stages) == pytest.approx(expected, abs=1e-12)
    assert theoretical_bubble("zb-h1", stages, micro_batches) == pytest.approx(expected)
    one_f_one_b = simulate(
        build_schedule("1f1b", stages, micro_batches), lambda t: 1.0 if t.kind == "F" else 2.0
    )
    assert makespan(one_f_one_b) - 3 * micro_batches == 3 * (stages - 1)  # 3x zb-h1's idle


@pytest.mark.parametrize(("stages", "micro_batches"), [(2, 1), (4, 1), (4, 3), (8, 5)])
def test_zb_h1_with_fewer_micro_batches_than_stages(stages, micro_batches):
    # Stage 0's first B waits 2K-1 passes and too few W's exist to fill that wait: the bubble
    # lies between the paper's M >= K figure and 1f1b's, and theoretical_bubble says which.
    timed = planned("zb-h1", stages, micro_batches)
    assert makespan(timed) == 2 * micro_batches + 2 * stages - 1
    measured = bubble_fraction(timed, stages)
    assert measured == pytest.approx(theoretical_bubble("zb-h1", stages, micro_batches))
    assert (stages - 1) / (3 * micro_batches + stages - 1) < measured
    assert measured < theoretical_bubble("1f1b", stages, micro_batches)


@pytest.mark.parametrize(
    ("stages", "micro_batches", "chunks"),
    [(2, 2, 2), (2, 4, 2), (4, 4, 2), (4, 8, 2), (4, 8, 4), (3, 6, 3), (8, 16, 2)],
)
def test_interleaved_cuts_the_bubble_by_the_number_of_chunks(stages, micro_batches, chunks):
    # Each chunk is 1/v of a device's share of the model, so its passes last 1/v.
    schedule = build_schedule("interleaved", stages, micro_batches, virtual_stages=chunks)
    timed = simulate(schedule, lambda t: 1.0 / chunks)
    expected = (stages - 1) / (chunks * micro_batches + stages - 1)  # (K-1)/(vM) of ideal
    assert bubble_fraction(timed, stages) == pytest.approx(expected, abs=1e-12)
    assert theoretical_bubble("interleaved", stages, micro_batches, chunks) == expected
    assert makespan(timed) == pytest.approx(2 * micro_batches + 2 * (stages - 1) / chunks)
    assert makespan(timed) < makespan(planned("1f1b", stages, micro_batches))
    assert all(t.device == t.stage % stages for t in timed)
    for d in range(stages):
        assert busy_time(timed, d) == pytest.approx(2 * micro_batches)


def test_interleaved_two_devices_two_chunks_four_micro_batches_on_the_time_line():
    timed = simulate(build_schedule("interleaved", 2, 4, virtual_stages=2), lambda t: 0.5)
    assert makespan(timed) == 9.0  # 1f1b with whole stages: 10
    assert planned("1f1b", 2, 4)[-1].end == 10.0
    grid = grid_cells(format_grid(timed))
    assert grid[:4] == [
        ["time", "device 0", "device 1"],
        ["0", "0F0", ""],
        ["0.5", "0F1", "1F0"],
        ["1", "2F0", "1F1"],
    ]
    assert grid[-1] == ["8.5", "0B3", ""]


def test_transfers_cost_only_between_devices():
    one_device = build_schedule("interleaved", 1, 2, virtual_stages=2)
    assert makespan(simulate(one_device, unit, transfer=5.0)) == makespan(
        simulate(one_device, unit)
    )
    two_devices = build_schedule("interleaved", 2, 2, virtual_stages=2)
    sent = []

    def record(task: Task) -> float:
        sent.append(str(task))
        return 0.0

    simulate(two_devices, unit, transfer=record)
    # Every F but the last stage's and every B but stage 0's crosses to another device.
    assert sorted(sent) == sorted(
        [f"{s}F{m}" for s in range(3) for m in range(2)]
        + [f"{s}B{m}" for s in range(1, 4) for m in range(2)]
    )


def test_weight_gradients_take_their_own_durations():
    durations = {(s, kind): {"F": 1.0, "I": 1.0, "W": 2.0}[kind] for s in (0, 1) for kind in "FIW"}
    asked = []

    def lookup(task: Task) -> float:
        asked.append(str(task))
        return durations[(task.stage, task.kind)]

    timed = simulate(build_schedule("zb-h1", 2, 2), lookup)
    assert sorted(t for t in asked if "W" in t) == ["0W0", "0W1", "1W0", "1W1"]
    assert [(str(t), t.start, t.end) for t in timed if t.kind == "W"] == [
        ("0W0", 4.0, 6.0),
        ("1W0", 5.0, 7.0),
        ("0W1", 7.0, 9.0),
        ("1W1", 7.0, 9.0),
    ]
    assert makespan(timed) == 9.0
    assert busy_time(timed, 0) == busy_time(timed, 1) == 8.0


def test_theoretical_bubble_of_each_schedule():
    assert theoretical_bubble("naive", 4, 1) == 0.75
    assert theoretical_bubble("gpipe", 4, 8) == theoretical_bubble("1f1b", 4, 8) == 3 / 11
    assert theoretical_bubble(4, 8) == 3 / 11  # the older form: stages, micro-batches
    assert theoretical_bubble("interleaved", 4, 8, 2) == 3 / 19
    assert theoretical_bubble("interleaved", 4, 8, virtual_stages=4) == 3 / 35
    assert theoretical_bubble("zb-h1", 4, 8) == pytest.approx(3 / 27)
    assert theoretical_bubble("zb-h1", 1, 3) == 0.0


def test_theoretical_bubble_refuses_what_cannot_be_built():
    with pytest.raises(GpkError, match="^schedule='interleaved' needs virtual_stages=2 or more"):
        theoretical_bubble("interleaved", 4, 8)
    with pytest.raises(GpkError, match="needs micro_batches=6 to be a multiple of the 4 devices"):
        theoretical_bubble("interleaved", 4, 6, 2)
    with pytest.raises(GpkError, match="^virtual_stages=2 applies only to schedule='interleaved'"):
        theoretical_bubble("1f1b", 4, 8, 2)
    with pytest.raises(GpkError, match="^schedule='zigzag' is not known"):
        theoretical_bubble("zigzag", 4, 8)
    with pytest.raises(TypeError, match="theoretical_bubble needs micro_batches"):
        theoretical_bubble("1f1b", 4)
