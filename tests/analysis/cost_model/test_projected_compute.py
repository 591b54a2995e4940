"""Projected rows whose compute is the counted step on a GPU's roofline, not the CPU's clock."""

from __future__ import annotations

import json
import pathlib

import pytest

from gpu_parallel_kit.analysis.cost_model.counted_work import from_counts
from gpu_parallel_kit.analysis.cost_model.projected_rows import ProjectionOptions, project_results
from gpu_parallel_kit.analysis.cost_model.roofline import LAUNCH_S
from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.results.run_result import RunResult

DATA = pathlib.Path(__file__).parent.parent / "data"
MLP = from_counts(json.loads((DATA / "mlp_jax_count.json").read_text()))
RESNET = from_counts(json.loads((DATA / "resnet50_jax_count.json").read_text()))


def single(experiment="e1", step=0.0051, batch=512, params=433_704) -> RunResult:
    """A measured CPU run like the demo's: the MLP, 5.1 ms per step of 512 samples."""
    return RunResult(
        run_id=f"{experiment}-single",
        experiment_id=experiment,
        strategy="single",
        devices=1,
        virtual=False,
        status="ok",
        global_batch=batch,
        step_time_s=step,
        throughput_samples_s=batch / step,
        extra={"parameter_bytes": params},
    )


def speedups(rows) -> dict[int, float]:
    table = comparison_table(rows)
    return dict(zip(table["devices"], table["speedup"], strict=True))


def test_the_mlp_on_eight_h100s_is_bound_by_launches_and_communication():
    rows = project_results(
        [single()], "nvlink4", [1, 4, 8], ProjectionOptions(strategies=["data"], work={"e1": MLP})
    )
    assert {r.extra["gpu"] for r in rows} == {"h100"}  # nvlink4's usual GPU
    assert all(r.device_kind == "gpu" for r in rows)
    one = rows[0]
    assert one.step_time_s == pytest.approx(MLP.kernels * LAUNCH_S)
    assert one.extra["compute_bound"] == "launches"
    assert speedups(rows)[8] < 3  # the CPU's clock said 7.5
    assert "counted" in one.reason and "h100" in one.reason


def test_every_counted_row_says_where_its_compute_came_from():
    rows = project_results(
        [single()], "nvlink3", [2], ProjectionOptions(strategies=["data"], work={"e1": MLP})
    )
    for row in rows:
        assert row.extra["compute_source"].startswith("counted: xla cost analysis")
        assert row.extra["flops_per_sample"] == pytest.approx(MLP.flops_per_sample)
        assert row.extra["efficiency"] == 0.45
        assert row.extra["gpu"] == "a100"
        assert row.extra["step_time_low_s"] <= row.step_time_s <= row.extra["step_time_high_s"]


def test_a_compute_bound_model_scales_and_its_band_is_wide():
    base = single(step=5.0, batch=256, params=25_583_592 * 4)
    rows = project_results(
        [base],
        "nvlink4",
        [1, 8],
        ProjectionOptions(strategies=["data"], device="a100", work={"e1": RESNET}),
    )
    assert speedups(rows)[8] > 6  # 800 MB of gradients are little beside 100 ms of compute
    one = rows[0]
    assert one.extra["step_time_high_s"] > one.step_time_s * 1.3
    assert 2375 / 2 < one.throughput_samples_s < 2375 * 2


def test_calibrated_the_projection_reproduces_the_given_throughput():
    base = single(step=5.0, batch=256, params=25_583_592 * 4)
    given = {"throughput_samples_s": 2000, "device": "a100", "global_batch": 256}
    rows = project_results(
        [base],
        "nvlink3",
        [1, 8],
        ProjectionOptions(strategies=["data"], calibrate=given, work={"e1": RESNET}),
    )
    assert rows[0].throughput_samples_s == pytest.approx(2000)
    # Another batch follows the model: twice the samples take about twice the time.
    bigger = project_results(
        [base],
        "nvlink3",
        [1],
        ProjectionOptions(calibrate=given, global_batch=512, work={"e1": RESNET}),
    )
    assert bigger[0].global_batch == 512
    assert 1900 < bigger[0].throughput_samples_s < 2100


def test_a_step_that_was_not_counted_falls_back_to_measured_compute_and_says_so():
    reason = "the step could not be counted (ValueError: no inputs)"
    rows = project_results(
        [single()], "nvlink4", [1, 8], ProjectionOptions(strategies=["data"], work={"e1": reason})
    )
    assert rows[0].step_time_s == pytest.approx(0.0051)
    assert rows[0].device_kind == "cpu"
    assert "not counted" in rows[0].reason
    assert any(reason in note for note in rows[0].extra["assumptions"])


def test_compute_scale_implies_measured_compute():
    rows = project_results(
        [single()], "nvlink4", [1], ProjectionOptions(compute_scale=10.0, work={"e1": MLP})
    )
    assert rows[0].step_time_s == pytest.approx(0.00051)
    with pytest.raises(GpkError, match="compute='measured'"):
        project_results(
            [single()], "nvlink4", [1], ProjectionOptions(compute="counted", compute_scale=10.0)
        )


def test_bad_precision_and_compute_are_one_sentence():
    with pytest.raises(GpkError, match="'fp32', 'tf32', 'bf16', 'fp16'"):
        project_results(
            [single()], "nvlink4", [1], ProjectionOptions(precision="int4", work={"e1": MLP})
        )
    with pytest.raises(GpkError, match="'counted' or 'measured'"):
        project_results(
            [single()], "nvlink4", [1], ProjectionOptions(compute="guessed", work={"e1": MLP})
        )


def tensor_run(devices=4, batch=512, experiment="e1") -> RunResult:
    """A measured JAX tensor-parallel run: two Dense kernels sharded over the model axis (3/4 of
    the parameters), one bias replicated, and one activation all-reduce of 256 floats a sample."""
    layout = [
        {"shape": [256, 512], "axes": [None, "model"]},
        {"shape": [512, 128], "axes": ["model", None]},
        {"shape": [65_536], "axes": [None]},
    ]
    return RunResult(
        run_id=f"{experiment}-tensor-{devices}",
        experiment_id=experiment,
        strategy="tensor",
        devices=devices,
        virtual=True,
        status="ok",
        global_batch=batch,
        step_time_s=0.004,
        throughput_samples_s=batch / 0.004,
        extra={"layout": layout, "collectives": [{"elements_per_sample": 256}]},
    )


def test_tensor_rows_compute_their_device_share_of_the_counted_step():
    from gpu_parallel_kit.analysis.cost_model import hardware_presets
    from gpu_parallel_kit.analysis.cost_model.roofline import DEFAULT_EFFICIENCY, step_compute

    base = single(step=5.0, batch=256, params=25_583_592 * 4)
    runs = [base, tensor_run(4, batch=256)]
    rows = project_results(
        runs, "nvlink4", [1, 4], ProjectionOptions(device="a100", work={"e1": RESNET})
    )
    (tensor,) = [r for r in rows if r.strategy == "tensor"]
    assert tensor.extra["compute_source"].startswith("counted")
    share = 256 * (0.75 / 4 + 0.25)  # samples' worth of work on one device
    a100 = hardware_presets.device("a100")
    expected = step_compute(RESNET, a100, "bf16", share, DEFAULT_EFFICIENCY.likely).seconds
    assert tensor.extra["compute_s"] == pytest.approx(expected)
    # Its band comes with it, and the measured CPU's 5 s step is nowhere.
    assert tensor.extra["step_time_low_s"] < tensor.step_time_s < tensor.extra["step_time_high_s"]
    assert tensor.step_time_s < 1.0


def test_a_launch_bound_tensor_step_keeps_every_launch_on_each_device():
    from gpu_parallel_kit.analysis.cost_model.roofline import LAUNCH_S

    rows = project_results(
        [single(), tensor_run(8)], "nvlink4", [8], ProjectionOptions(work={"e1": MLP})
    )
    (tensor,) = [r for r in rows if r.strategy == "tensor"]
    assert tensor.extra["compute_s"] >= MLP.kernels * LAUNCH_S  # thin shards, the same launches
