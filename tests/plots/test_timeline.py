"""The pipeline timeline's lanes: a device each, or a stage of several devices on a sub-mesh."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from gpu_parallel_kit.plots.timeline import timeline_figure  # noqa: E402


def _row(device, stage, micro_batch, kind, start, end):
    return {
        "step": 0,
        "device": device,
        "stage": stage,
        "micro_batch": micro_batch,
        "kind": kind,
        "start": start,
        "end": end,
    }


TWO_STAGES = [
    _row(0, 0, 0, "forward", 0.0, 1.0),
    _row(1, 1, 0, "forward", 1.0, 2.0),
    _row(1, 1, 0, "backward", 2.0, 4.0),
    _row(0, 0, 0, "backward", 4.0, 6.0),
]


def _lanes(extra):
    (axis,) = timeline_figure(extra, "pipeline").axes
    return [label.get_text() for label in axis.get_yticklabels()]


def test_a_lane_of_one_device_is_named_for_the_device():
    assert _lanes({"timeline": TWO_STAGES}) == ["device 0", "device 1"]
    assert _lanes({"timeline": TWO_STAGES, "lane_devices": [1, 1]}) == ["device 0", "device 1"]


def test_a_lane_of_a_stage_on_four_devices_is_named_for_the_stage():
    extra = {"timeline": TWO_STAGES, "lane_devices": [4, 4]}
    assert _lanes(extra) == ["stage 0 (4 devices)", "stage 1 (4 devices)"]


def test_an_interleaved_lane_names_each_of_its_stages():
    rows = [*TWO_STAGES, _row(0, 2, 0, "forward", 2.0, 3.0), _row(1, 3, 0, "forward", 3.0, 4.0)]
    extra = {"timeline": rows, "lane_devices": [2, 2]}
    assert _lanes(extra) == ["stages 0, 2 (2 devices)", "stages 1, 3 (2 devices)"]
