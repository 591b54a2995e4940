"""Pipeline schedules compared with literal task lists, and the checks that reject bad ones."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.pipeline.schedules import (
    SCHEDULES,
    Task,
    build_schedule,
    dependencies,
    device_of,
    execution_order,
    format_grid,
    host_dispatches,
    max_live_micro_batches,
    splits_backward,
    stage_count,
    validate_schedule,
)
from tests.pipeline.text_tables import grid_cells


def texts(tasks) -> list[str]:
    return [str(t) for t in tasks]


def parse_rows(*rows: str) -> tuple[tuple[Task, ...], ...]:
    return tuple(tuple(Task.parse(word) for word in row.split()) for row in rows)


def test_task_text_round_trips():
    task = Task(1, "F", 0)
    assert str(task) == "1F0"
    assert Task.parse("1F0") == task
    assert Task.parse("12B34") == Task(12, "B", 34)
    for text in ["0F0", "3B7", "10F11"]:
        assert str(Task.parse(text)) == text


@pytest.mark.parametrize("text", ["1X0", "F0", "1F", "-1F0", "1f0", "1F0B1", ""])
def test_a_bad_task_text_is_named_in_the_error(text):
    with pytest.raises(ValueError, match=f"cannot read task {text!r}; write stage"):
        Task.parse(text)


def test_a_task_rejects_an_unknown_kind_and_negative_indices():
    with pytest.raises(GpkError, match="task kind 'X' is not known; use 'F' or 'B'"):
        Task(0, "X", 0)
    with pytest.raises(GpkError, match="negative index"):
        Task(-1, "F", 0)


def test_naive_runs_forward_then_backward_on_each_stage():
    assert [texts(s) for s in build_schedule("naive", 3, 1)] == [
        ["0F0", "0B0"],
        ["1F0", "1B0"],
        ["2F0", "2B0"],
    ]


def test_gpipe_runs_all_forwards_then_backwards_in_reverse():
    assert texts(build_schedule("gpipe", 2, 2)[0]) == ["0F0", "0F1", "0B1", "0B0"]
    assert [texts(s) for s in build_schedule("gpipe", 2, 3)] == [
        ["0F0", "0F1", "0F2", "0B2", "0B1", "0B0"],
        ["1F0", "1F1", "1F2", "1B2", "1B1", "1B0"],
    ]


def test_1f1b_with_4_stages_and_8_micro_batches():
    schedule = build_schedule("1f1b", 4, 8)
    assert texts(schedule[0]) == [
        "0F0", "0F1", "0F2",  # warm-up: K-1-s = 3 forwards
        "0F3", "0B0", "0F4", "0B1", "0F5", "0B2", "0F6", "0B3", "0F7", "0B4",  # steady
        "0B5", "0B6", "0B7",  # cool-down
    ]  # fmt: skip
    assert texts(schedule[1]) == [
        "1F0", "1F1",
        "1F2", "1B0", "1F3", "1B1", "1F4", "1B2", "1F5", "1B3", "1F6", "1B4", "1F7", "1B5",
        "1B6", "1B7",
    ]  # fmt: skip
    assert texts(schedule[3]) == [
        "3F0", "3B0", "3F1", "3B1", "3F2", "3B2", "3F3", "3B3",
        "3F4", "3B4", "3F5", "3B5", "3F6", "3B6", "3F7", "3B7",
    ]  # fmt: skip


def test_1f1b_with_fewer_micro_batches_than_stages_warms_up_with_all_of_them():
    assert [texts(s) for s in build_schedule("1f1b", 3, 1)] == [
        ["0F0", "0B0"],
        ["1F0", "1B0"],
        ["2F0", "2B0"],
    ]
    assert texts(build_schedule("1f1b", 4, 2)[0]) == ["0F0", "0F1", "0B0", "0B1"]


@pytest.mark.parametrize(
    ("name", "stages", "micro_batches"),
    [
        (name, stages, micro_batches)
        for name in SCHEDULES
        for stages, micro_batches in [(1, 1), (2, 1), (4, 1), (1, 5), (3, 4)]
        if name != "naive" or micro_batches == 1  # naive runs one micro-batch
        if name != "interleaved"  # needs virtual_stages: tested below
    ],
)
def test_every_built_schedule_is_valid(name, stages, micro_batches):
    schedule = build_schedule(name, stages, micro_batches)
    validate_schedule(schedule, stages, micro_batches)
    kinds = 3 if name == "zb-h1" else 2  # zb-h1 splits each backward into B and W
    assert len(execution_order(schedule)) == kinds * stages * micro_batches


@pytest.mark.parametrize(("stages", "micro_batches"), [(4, 8), (2, 5), (8, 3), (5, 5)])
def test_big_1f1b_and_gpipe_are_valid(stages, micro_batches):
    for name in ("gpipe", "1f1b"):
        validate_schedule(build_schedule(name, stages, micro_batches), stages, micro_batches)


def test_build_schedule_errors_carry_the_values_and_the_fix():
    with pytest.raises(
        GpkError,
        match=r"^schedule='naive' runs one micro-batch; use micro_batches=1, "
        r"or schedule='gpipe' for 8$",
    ):
        build_schedule("naive", 2, 8)
    with pytest.raises(
        GpkError,
        match=r"^schedule='zigzag' is not known; use one of 'naive', 'gpipe', '1f1b', "
        r"'interleaved', 'zb-h1'$",
    ):
        build_schedule("zigzag", 2, 2)
    with pytest.raises(GpkError, match=r"^stages=0 is too few; use stages=1 or more$"):
        build_schedule("gpipe", 0, 2)
    with pytest.raises(GpkError, match=r"^micro_batches=0 is too few"):
        build_schedule("gpipe", 2, 0)
    with pytest.raises(TypeError, match="stages must be an int, not float"):
        build_schedule("gpipe", 2.0, 2)


def test_dependencies_follow_the_pipeline():
    assert dependencies(Task(0, "F", 3), 4) == ()
    assert dependencies(Task(2, "F", 3), 4) == (Task(1, "F", 3),)
    assert dependencies(Task(3, "B", 3), 4) == (Task(3, "F", 3),)
    assert dependencies(Task(1, "B", 3), 4) == (Task(2, "B", 3), Task(1, "F", 3))


def test_format_grid_of_a_schedule_lists_each_stage_in_its_own_column():
    assert grid_cells(format_grid(build_schedule("gpipe", 2, 2))) == [
        ["step", "stage 0", "stage 1"],
        ["0", "0F0", "1F0"],
        ["1", "0F1", "1F1"],
        ["2", "0B1", "1B1"],
        ["3", "0B0", "1B0"],
    ]
    uneven = parse_rows("0F0 0B0", "1F0")
    assert grid_cells(format_grid(uneven))[-1] == ["1", "0B0", ""]


def test_a_deadlock_is_reported_with_who_waits_for_what_and_the_grid():
    schedule = parse_rows("0F0 0B0 0F1 0B1", "1F1 1F0 1B0 1B1")
    with pytest.raises(ValueError) as caught:
        validate_schedule(schedule, 2, 2)
    message = str(caught.value)
    assert message.startswith(
        "the schedule deadlocks (stage 0 waits at 0B0 for 1B0; stage 1 waits at 1F1 for 0F1)"
    )
    assert message.splitlines()[1:] == format_grid(schedule).splitlines()
    assert grid_cells("\n".join(message.splitlines()[1:]))[1] == ["0", "0F0", "1F1"]


def test_a_missing_or_repeated_task_is_named():
    with pytest.raises(ValueError, match=r"task 1B1 appears 0 times; list it exactly once:\n"):
        validate_schedule(parse_rows("0F0 0F1 0B1 0B0", "1F0 1F1 1B0"), 2, 2)
    with pytest.raises(ValueError, match="task 0F0 appears 2 times"):
        validate_schedule(parse_rows("0F0 0F0 0B0"), 1, 1)


def test_a_task_on_the_wrong_stage_or_micro_batch_is_named():
    with pytest.raises(ValueError, match="task 1F0 does not belong in stage 0's list"):
        validate_schedule(parse_rows("1F0 0F0 0B0", "1F0 1B0"), 2, 1)
    with pytest.raises(ValueError, match="task 0F2 does not belong in stage 0's list of 2"):
        validate_schedule(parse_rows("0F0 0F1 0F2 0B0 0B1"), 1, 2)


def test_a_backward_before_its_forward_is_named():
    with pytest.raises(ValueError, match="0B1 comes before 0F1; put each backward after"):
        validate_schedule(parse_rows("0F0 0B1 0F1 0B0"), 1, 2)


def test_the_number_of_stage_lists_must_match():
    with pytest.raises(ValueError, match="the schedule has 1 stage lists, not 2"):
        validate_schedule(parse_rows("0F0 0B0"), 2, 1)


def test_max_live_micro_batches():
    gpipe = build_schedule("gpipe", 4, 8)
    assert [max_live_micro_batches(s) for s in gpipe] == [8, 8, 8, 8]
    one_f_one_b = build_schedule("1f1b", 4, 8)
    assert [max_live_micro_batches(s) for s in one_f_one_b] == [4, 3, 2, 1]
    assert [max_live_micro_batches(s) for s in build_schedule("1f1b", 4, 2)] == [2, 2, 2, 1]
    assert max_live_micro_batches([]) == 0


@pytest.mark.parametrize(("stages", "micro_batches"), [(2, 1), (3, 7), (6, 4), (8, 8)])
def test_1f1b_holds_at_most_k_minus_s_micro_batches(stages, micro_batches):
    schedule = build_schedule("1f1b", stages, micro_batches)
    for s, tasks in enumerate(schedule):
        assert max_live_micro_batches(tasks) == min(stages - s, micro_batches)


def test_a_weight_gradient_task_round_trips():
    assert str(Task(2, "W", 5)) == "2W5"
    assert Task.parse("2W5") == Task(2, "W", 5)
    with pytest.raises(GpkError, match=r"write stage, F, B, I or W, micro-batch, e\.g\. '1F0'"):
        Task.parse("2w5")


def test_stages_go_round_the_devices():
    assert [device_of(s, 4) for s in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [device_of(s, 1) for s in range(3)] == [0, 0, 0]
    with pytest.raises(GpkError, match=r"^devices=0 is too few; use devices=1 or more$"):
        device_of(3, 0)


def test_interleaved_with_2_devices_2_chunks_and_4_micro_batches():
    # Megatron-LM's order: K micro-batches through chunk 0, the same through chunk 1, then the
    # next K; device d warms up with 2(K-d-1) + (v-1)K forwards. Stages 0, 2 on device 0.
    schedule = build_schedule("interleaved", 2, 4, virtual_stages=2)
    assert [texts(d) for d in schedule] == [
        [
            "0F0", "0F1", "2F0", "2F1",  # warm-up: 2 + 2
            "0F2", "2B0", "0F3", "2B1", "2F2", "0B0", "2F3", "0B1",  # steady
            "2B2", "2B3", "0B2", "0B3",  # cool-down
        ],
        [
            "1F0", "1F1",  # warm-up: 0 + 2
            "3F0", "3B0", "3F1", "3B1", "1F2", "1B0", "1F3", "1B1",
            "3F2", "3B2", "3F3", "3B3",
            "1B2", "1B3",
        ],
    ]  # fmt: skip
    assert stage_count(schedule) == 4
    assert not splits_backward(schedule)
    validate_schedule(schedule, 2, 4, virtual_stages=2)


@pytest.mark.parametrize(
    ("stages", "micro_batches", "chunks"),
    [(1, 1, 2), (1, 3, 3), (2, 2, 2), (2, 6, 3), (3, 3, 2), (4, 8, 2), (4, 4, 4), (8, 16, 2)],
)
def test_every_interleaved_schedule_is_valid(stages, micro_batches, chunks):
    schedule = build_schedule("interleaved", stages, micro_batches, virtual_stages=chunks)
    validate_schedule(schedule, stages, micro_batches, virtual_stages=chunks)
    assert len(schedule) == stages
    assert stage_count(schedule) == stages * chunks
    for d, tasks in enumerate(schedule):
        assert {t.stage for t in tasks} == set(range(d, stages * chunks, stages))
    assert len(execution_order(schedule)) == 2 * stages * chunks * micro_batches


def test_zb_h1_with_2_stages_and_2_micro_batches():
    schedule = build_schedule("zb-h1", 2, 2)
    assert [texts(s) for s in schedule] == [
        ["0F0", "0F1", "0I0", "0W0", "0I1", "0W1"],
        ["1F0", "1I0", "1F1", "1I1", "1W0", "1W1"],  # the last stage defers W by K-1 = 1
    ]
    assert splits_backward(schedule)


def test_zb_h1_with_4_stages_and_4_micro_batches():
    # 1F1B's order of F and B; stage s defers each W by s micro-batches into the cool-down.
    assert [texts(s) for s in build_schedule("zb-h1", 4, 4)] == [
        ["0F0", "0F1", "0F2", "0F3", "0I0", "0W0", "0I1", "0W1", "0I2", "0W2", "0I3", "0W3"],
        ["1F0", "1F1", "1F2", "1I0", "1F3", "1I1", "1W0", "1I2", "1W1", "1I3", "1W2", "1W3"],
        ["2F0", "2F1", "2I0", "2F2", "2I1", "2F3", "2I2", "2W0", "2I3", "2W1", "2W2", "2W3"],
        ["3F0", "3I0", "3F1", "3I1", "3F2", "3I2", "3F3", "3I3", "3W0", "3W1", "3W2", "3W3"],
    ]


@pytest.mark.parametrize(("stages", "micro_batches"), [(2, 1), (3, 7), (6, 4), (8, 8), (4, 16)])
def test_zb_h1_is_1f1b_with_each_weight_gradient_after_its_backward(stages, micro_batches):
    zb_h1 = build_schedule("zb-h1", stages, micro_batches)
    one_f_one_b = build_schedule("1f1b", stages, micro_batches)
    validate_schedule(zb_h1, stages, micro_batches)
    for split, whole in zip(zb_h1, one_f_one_b, strict=True):
        # each whole backward B of 1f1b an input backward I here
        assert [str(t).replace("I", "B") for t in split if t.kind != "W"] == list(map(str, whole))
        weights = [t.micro_batch for t in split if t.kind == "W"]
        assert weights == list(range(micro_batches))


def test_zb_h1_holds_1f1b_peak_activations():
    # Live from F until W, which still needs the stored layer inputs: every stage holds
    # min(K, M), 1f1b's peak (its stage 0). Until B only, it is 1f1b's K - s stage by stage.
    for stages, micro_batches in [(4, 8), (4, 4), (3, 2), (8, 16)]:
        zb_h1 = build_schedule("zb-h1", stages, micro_batches)
        one_f_one_b = build_schedule("1f1b", stages, micro_batches)
        peak = max(max_live_micro_batches(s) for s in one_f_one_b)
        assert [max_live_micro_batches(s) for s in zb_h1] == [peak] * stages
        assert [max_live_micro_batches(s, free_at="I") for s in zb_h1] == [
            max_live_micro_batches(s) for s in one_f_one_b
        ]
    assert [max_live_micro_batches(s) for s in build_schedule("zb-h1", 4, 8)] == [4, 4, 4, 4]


def test_interleaved_holds_its_warm_up_plus_one_chunk():
    schedule = build_schedule("interleaved", 2, 4, virtual_stages=2)
    assert [max_live_micro_batches(d) for d in schedule] == [5, 3]  # 2(K-d-1) + (v-1)K + 1
    schedule = build_schedule("interleaved", 4, 8, virtual_stages=2)
    assert [max_live_micro_batches(d) for d in schedule] == [11, 9, 7, 5]


def test_free_at_must_name_a_task_that_frees():
    with pytest.raises(GpkError, match=r"^free_at='W' cannot free activations of these tasks"):
        max_live_micro_batches(build_schedule("1f1b", 2, 2)[0], free_at="W")
    with pytest.raises(GpkError, match=r"^free_at='F' cannot free"):
        max_live_micro_batches(build_schedule("zb-h1", 2, 2)[0], free_at="F")


def test_interleaved_and_virtual_stage_errors_carry_the_values_and_the_fix():
    with pytest.raises(
        GpkError,
        match=r"^schedule='interleaved' needs virtual_stages=2 or more model chunks per device, "
        r"not 1; use e\.g\. virtual_stages=2, or schedule='1f1b'$",
    ):
        build_schedule("interleaved", 4, 8)
    with pytest.raises(
        GpkError,
        match=r"^schedule='interleaved' needs micro_batches=6 to be a multiple of the 4 devices; "
        r"use e\.g\. micro_batches=4 or 8$",
    ):
        build_schedule("interleaved", 4, 6, virtual_stages=2)
    with pytest.raises(GpkError, match=r"use e\.g\. micro_batches=4 or 8$"):
        build_schedule("interleaved", 4, 3, virtual_stages=2)
    with pytest.raises(
        GpkError,
        match=r"^virtual_stages=2 applies only to schedule='interleaved'; "
        r"use virtual_stages=1 with schedule='zb-h1'$",
    ):
        build_schedule("zb-h1", 4, 8, virtual_stages=2)
    with pytest.raises(GpkError, match=r"^virtual_stages=0 is too few"):
        build_schedule("interleaved", 4, 8, virtual_stages=0)
    with pytest.raises(TypeError, match="virtual_stages must be an int, not float"):
        build_schedule("interleaved", 4, 8, virtual_stages=2.0)


def test_a_weight_gradient_waits_for_its_backward_only():
    assert dependencies(Task(1, "W", 3), 4) == (Task(1, "I", 3),)
    assert dependencies(Task(3, "W", 0), 4) == (Task(3, "I", 0),)
    assert dependencies(Task(1, "I", 3), 4) == (Task(2, "I", 3), Task(1, "F", 3))
    # Interleaved: stage 2 on device 0 waits for stage 1 on device 1, as any stage would.
    assert dependencies(Task(2, "F", 0), 4) == (Task(1, "F", 0),)
    assert dependencies(Task(2, "B", 0), 4) == (Task(3, "B", 0), Task(2, "F", 0))


def test_a_missing_or_early_weight_gradient_is_named():
    with pytest.raises(ValueError, match=r"^task 1W1 appears 0 times; list it exactly once:\n"):
        validate_schedule(parse_rows("0F0 0F1 0I0 0W0 0I1 0W1", "1F0 1I0 1F1 1I1 1W0"), 2, 2)
    with pytest.raises(ValueError, match="0W0 comes before 0I0; put each weight gradient after"):
        validate_schedule(parse_rows("0F0 0W0 0I0"), 1, 1)


def test_interleaved_lists_are_checked_per_device():
    schedule = build_schedule("interleaved", 2, 2, virtual_stages=2)
    with pytest.raises(ValueError, match="the schedule has 1 device lists, not 2"):
        validate_schedule(schedule[:1], 2, 2, virtual_stages=2)
    wrong = (schedule[1], schedule[0])
    with pytest.raises(ValueError, match="task 1F0 does not belong in device 0's list of 2"):
        validate_schedule(wrong, 2, 2, virtual_stages=2)
    with pytest.raises(ValueError, match="task 2B0 appears 0 times"):
        validate_schedule(build_schedule("1f1b", 2, 2), 2, 2, virtual_stages=2)


def test_an_interleaved_deadlock_names_the_devices():
    # Device 0 runs chunk 2 before chunk 0 has fed device 1, which needs 0F0 for 1F0.
    schedule = parse_rows("2F0 2B0 0F0 0B0", "1F0 3F0 3B0 1B0")
    with pytest.raises(ValueError) as caught:
        validate_schedule(schedule, 2, 1, virtual_stages=2)
    message = str(caught.value)
    assert message.startswith(
        "the schedule deadlocks (device 0 waits at 2F0 for 1F0; device 1 waits at 1F0 for 0F0)"
    )
    assert message.splitlines()[1].split() == ["step", "device", "0", "device", "1"]


def test_format_grid_of_an_interleaved_schedule_heads_columns_by_device():
    grid = grid_cells(format_grid(build_schedule("interleaved", 2, 2, virtual_stages=2)))
    assert grid[:3] == [["step", "device 0", "device 1"], ["0", "0F0", "1F0"], ["1", "0F1", "1F1"]]


def test_schedules_do_not_import_tensorflow():
    code = (
        "import sys\n"
        "import gpu_parallel_kit.pipeline.schedules, gpu_parallel_kit.pipeline.simulation\n"
        "import gpu_parallel_kit.pipeline.partition\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("name", "stages", "micro_batches", "chunks", "calls"),
    [
        ("gpipe", 2, 4, 1, 2 * 2 * 4 + 2),  # F and B per micro-batch and stage, each update
        ("gpipe", 4, 4, 1, 4 * 2 * 4 + 4),
        ("interleaved", 2, 4, 2, 2 * 2 * 2 * 4 + 2),  # per chunk too; one update a device
        ("zb-h1", 2, 4, 1, 2 * 3 * 4 + 2),  # F, I and W
    ],
)
def test_the_host_dispatches_every_task_and_each_devices_update(
    name, stages, micro_batches, chunks, calls
):
    schedule = build_schedule(name, stages, micro_batches, virtual_stages=chunks)
    assert host_dispatches(schedule) == calls
