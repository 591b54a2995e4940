"""What each run moves per step: the table a notebook shows and the bars the sharding figure
draws are the same column (literal results, no worker)."""

from __future__ import annotations

import math

from gpu_parallel_kit.analysis.tables.readable_frame import readable_cells
from gpu_parallel_kit.analysis.tables.traffic_table import across_cuts, traffic_table
from gpu_parallel_kit.plots.sharding import sharding_cost_figure
from gpu_parallel_kit.runs.results.run_result import RunResult

KIB = 1024
MIB = 2**20


def _result(strategy, devices, backend="jax", comm_bytes=None, **extra):
    return RunResult(
        run_id=f"{strategy}{devices}{backend}",
        experiment_id="e",
        strategy=strategy,
        devices=devices,
        virtual=True,
        status="ok",
        backend=backend,
        step_time_s=0.01,
        throughput_samples_s=100.0,
        comm_bytes=comm_bytes,
        extra={"state_bytes": {f"/cpu:{i}": 600 * KIB for i in range(devices)}, **extra},
    )


def _runs():
    stages = [{"stage": 0, "device": "/cpu:0"}, {"stage": 1, "device": "/cpu:1"}]
    return [
        _result("single", 1, "tensorflow"),
        _result("pipeline", 2, "tensorflow", 128 * KIB, cut_bytes=[128 * KIB], stages=stages),
        _result("single", 1),
        _result(
            "fsdp", 2, comm_bytes=1200 * KIB, traffic_bytes_per_device=600 * KIB,
            all_gather_bytes=800 * KIB, reduce_scatter_bytes=400 * KIB,
        ),
        _result("tensor", 2, comm_bytes=96 * KIB, traffic_bytes_per_device=96 * KIB),
        _result("tensor", 1),
    ]  # fmt: skip


def test_the_chart_draws_the_column_the_table_shows_a_pipeline_included():
    runs = _runs()
    table = traffic_table(runs)
    traffic_axis = sharding_cost_figure(runs).axes[1]
    drawn = [p.get_height() for p in traffic_axis.patches]
    assert drawn == list(table["per_device_bytes"] / MIB)
    labels = [t.get_text() for t in traffic_axis.get_xticklabels()]
    assert list(table["strategy"]) == [label.split("×")[0] for label in labels]
    pipeline = table[table["strategy"] == "pipeline"].iloc[0]
    assert pipeline["comm_bytes"] == pipeline["per_device_bytes"] == 128 * KIB
    assert drawn[list(table["strategy"]).index("pipeline")] == 0.125  # not 0 MiB
    assert "tensor" in list(table["strategy"]) and len(table) == 5  # tensor×1 is neither


def test_a_figure_that_does_not_apply_is_a_dash_with_its_footnote_never_nan():
    table = traffic_table(_runs())
    html = table._repr_html_()
    assert "NaN" not in html and "&lt;NA&gt;" not in html and "nan" not in html
    cells = readable_cells(table, "—")
    pipeline = cells[table["strategy"] == "pipeline"].iloc[0]
    assert pipeline[["gathered_bytes", "scattered_bytes"]].tolist() == ["—", "—"]
    assert pipeline[["comm_bytes", "per_device_bytes"]].tolist() == ["128 KiB", "128 KiB"]
    assert "—: not done by this strategy" in html
    shown = table[["strategy", "comm_bytes"]]._repr_html_()  # a selection keeps its footnote
    assert "—: not done" in shown and "NaN" not in shown
    assert "—" not in table[["strategy", "per_device_bytes"]]._repr_html_()


def test_a_device_between_two_cuts_moves_both():
    stages = [{"device": d} for d in ("a", "b", "c", "a")]  # the last stage back on device a
    assert across_cuts([100, 60, 40], stages) == 160  # b: cuts 0 and 1; a: cuts 0 and 2
    assert across_cuts([100, 60], []) == 160  # no stages named: one device per stage
    assert math.isnan(traffic_table([_result("data", 2)])["per_device_bytes"][0])
