"""The cost model's one pipeline replay, on literal tasks: compute, collectives, sends."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.pipeline_replay import (
    PipelineTasks,
    replay,
    stage_work,
)
from gpu_parallel_kit.pipeline.schedules import build_schedule

GPIPE = build_schedule("gpipe", 2, 1)  # 0F0 1F0 1B0 0B0, one device a stage


def tasks(**given) -> PipelineTasks:
    """Two stages, one micro-batch: forward 1 s, backward 2 s, 0.5 s across the cut."""
    return PipelineTasks(GPIPE, stage_work(GPIPE, [1.0, 1.0], [2.0, 2.0]), [0.5], **given)


def test_a_blocking_send_waits_before_the_receiving_task():
    step = replay(tasks())
    assert step.step_s == 1 + 0.5 + 1 + 2 + 0.5 + 2
    assert step.free_s == 6  # the tasks alone
    assert step.busy_s == (3.0, 3.0)
    assert step.bubble == pytest.approx(1 - 6 / (2 * 7))
    assert step.sends_s == 1.0  # one message down, one back


def test_a_send_in_flight_is_paid_only_where_a_device_waits_for_it():
    # With one micro-batch every send is waited for: in flight or not, the step is the same.
    assert replay(tasks(), overlap=True).step_s == replay(tasks()).step_s
    four = build_schedule("gpipe", 2, 4)
    sent = PipelineTasks(four, stage_work(four, [1.0, 1.0], [2.0, 2.0]), [0.5])
    assert replay(sent, overlap=True).step_s < replay(sent).step_s


def test_the_collectives_inside_a_task_lengthen_it():
    with_comm = replay(tasks(comm={(0, "B"): 1.0}))
    assert with_comm.step_s == replay(tasks()).step_s + 1.0
    assert with_comm.free_s == 6  # compute alone


def test_a_split_backward_is_half_input_gradient_and_half_weight_gradient():
    zero_bubble = build_schedule("zb-h1", 2, 2)
    work = stage_work(zero_bubble, [1.0, 1.0], [2.0, 4.0])
    assert (work[(1, "I")], work[(1, "W")]) == (2.0, 2.0)
    assert stage_work(GPIPE, [1.0, 1.0], [2.0, 4.0])[(1, "B")] == 4.0
    assert replay(PipelineTasks(zero_bubble, work, [0.0])).busy_s == (6.0, 10.0)
