"""A pipeline's figures from its runner's step reports, on literal task times: what both
backends' pipelines fill their rows from (`worker/pipeline/timeline.py`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpu_parallel_kit.pipeline.schedules import build_schedule
from gpu_parallel_kit.worker.pipeline.timeline import measured_bubble, schedule_figures


def task(stage, kind, start, end, transfer_s=0.0, call_s=None):
    return SimpleNamespace(
        stage=stage,
        kind=kind,
        micro_batch=0,
        start=start,
        end=end,
        transfer_s=transfer_s,
        bytes_in=0,
        call_s=end - start - transfer_s if call_s is None else call_s,
        device=stage,
    )


# naive on 2 devices: F0 [0, 1], F1 [1, 2], B1 [2, 4], B0 [4, 6], each copy 0.5 s of its task
STEP = [
    task(0, "F", 0.0, 1.0),
    task(1, "F", 1.0, 2.0, transfer_s=0.5),
    task(1, "B", 2.0, 4.0),
    task(0, "B", 4.0, 6.0, transfer_s=0.5),
]
SPEC = SimpleNamespace(schedule="naive", virtual_stages=1)


def report(tasks, serial=False):
    return SimpleNamespace(
        tasks=tasks,
        serial=serial,
        cut_bytes=[64],
        update_s=[0.0, 0.0],
        duration_s=max(t.end for t in tasks) + 0.25,
        peak_live=[1, 1],
        steps_in_call=1,
    )


def test_a_timed_step_gives_its_timeline_bubble_and_copies():
    found = schedule_figures(build_schedule("naive", 2, 1), [report(STEP)], SPEC)
    assert [row["kind"] for row in found["timeline"]] == [
        "forward",
        "forward",
        "backward",
        "backward",
    ]
    # 6 s of work on 2 devices over a 6 s step: half of the devices' time idle.
    assert found["bubble_fraction"] == pytest.approx(0.5)
    assert found["bubble_fraction"] == measured_bubble(STEP, 2)
    # The copy into stage 1's forward and into stage 0's backward both cross cut 0.
    assert found["cut_time_s"] == [pytest.approx(1.0)]
    assert found["comm_time_s"] == pytest.approx(1.0)
    assert found["cut_bytes"] == [64]
    assert found["outside_tasks_s"] == pytest.approx(0.25)
    assert found["task_overhead_s"] == pytest.approx(0.0)
    assert found["bubble_simulated"] is None  # no pass timed alone


def test_passes_timed_alone_give_the_simulated_step():
    alone = report(STEP, serial=True)
    found = schedule_figures(build_schedule("naive", 2, 1), [report(STEP), alone], SPEC)
    # Replayed on independent devices, naive stays stage after stage: 1 + 1 + 2 + 2.
    assert found["simulated_step_time_s"] == pytest.approx(6.0)
    assert found["work_alone_s"] == pytest.approx(6.0)
    assert 0 < found["bubble_simulated"] < 1
