"""Step breakdown and effective bandwidth on literal rows."""

from __future__ import annotations

import math

import pytest

from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table
from gpu_parallel_kit.analysis.tables.step_breakdown import effective_bandwidth, step_breakdown
from gpu_parallel_kit.runs.results.run_result import RunResult


def test_data_parallel_step_is_compute_plus_exposed_communication():
    assert step_breakdown({"step_time_s": 0.1, "comm_time_s": 0.03}) == pytest.approx(
        (0.07, 0.03, 0.0)
    )


def test_negative_exposed_communication_is_noise_and_counts_as_none():
    assert step_breakdown({"step_time_s": 0.1, "comm_time_s": -0.002}) == (0.1, 0.0, 0.0)


def test_pipeline_step_has_its_bubble_as_idle_time():
    compute, comm, idle = step_breakdown(
        {"step_time_s": 0.2, "comm_time_s": 0.01, "bubble_fraction": 0.5}
    )
    assert (compute, comm, idle) == pytest.approx((0.09, 0.01, 0.1))


def test_no_step_time_no_breakdown():
    assert all(math.isnan(v) for v in step_breakdown({"step_time_s": None}))


def test_effective_bandwidth_needs_exposed_time():
    assert effective_bandwidth({"comm_bytes": 1e6, "comm_time_s": 0.01}) == pytest.approx(1e8)
    assert math.isnan(effective_bandwidth({"comm_bytes": 1e6, "comm_time_s": -0.01}))


def test_table_columns_follow_the_breakdown():
    row = RunResult(
        run_id="a",
        experiment_id="e",
        strategy="data",
        devices=2,
        virtual=True,
        status="ok",
        step_time_s=0.1,
        throughput_samples_s=1000.0,
        comm_time_s=0.02,
        comm_bytes=2_000_000,
        global_batch=100,
    )
    table = comparison_table([row])
    assert table.loc[0, "compute_time_s"] == pytest.approx(0.08)
    assert table.loc[0, "effective_bandwidth_bytes_s"] == pytest.approx(1e8)
