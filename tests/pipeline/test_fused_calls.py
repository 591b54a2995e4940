"""The last stage's forward and backward run as one call where they are back to back; the
update joins the call with a device's last backward when the device holds that stage alone."""

from __future__ import annotations

from gpu_parallel_kit.pipeline.fused_calls import FusedCall, fused_calls
from gpu_parallel_kit.pipeline.schedules import build_schedule
from gpu_parallel_kit.pipeline.tasks import Task


def _tasks(*texts):
    return [Task.parse(t) for t in texts]


def test_one_stage_one_micro_batch_is_one_call_with_its_update():
    (device,) = build_schedule("naive", 1, 1)
    assert fused_calls(device, last_stage=0) == {0: FusedCall(0, with_update=True)}


def test_1f1b_fuses_every_pair_of_the_last_stage_and_the_update_once():
    schedule = build_schedule("1f1b", 2, 3)
    assert fused_calls(schedule[0], last_stage=1) == {}  # not the last stage
    fused = fused_calls(schedule[1], last_stage=1)
    assert sorted(fused) == [0, 2, 4]
    assert [call.with_update for call in fused.values()] == [False, False, True]


def test_gpipe_fuses_only_the_pair_that_meets():
    fused = fused_calls(_tasks("1F0", "1F1", "1B1", "1B0"), last_stage=1)
    assert fused == {1: FusedCall(1, with_update=False)}  # B0 is the last task, not fused


def test_a_split_backward_and_a_device_of_two_stages_keep_their_update_apart():
    assert fused_calls(_tasks("1F0", "1B0", "1W0"), last_stage=1) == {}
    mixed = _tasks("1F0", "3F0", "3B0")  # interleaved: stages 1 and 3 on one device
    assert fused_calls(mixed, last_stage=3) == {1: FusedCall(1, with_update=False)}
