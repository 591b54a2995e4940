"""Comparison.project adds labelled projected rows beside the measured ones, never mixed."""

from __future__ import annotations

import pathlib

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.runs.results import RunResult


def _measured(strategy: str, devices: int, step: float) -> RunResult:
    return RunResult(
        run_id=f"{strategy}{devices}",
        experiment_id="e1",
        strategy=strategy,
        devices=devices,
        virtual=devices > 1,
        status="ok",
        global_batch=256,
        step_time_s=step,
        throughput_samples_s=256 / step,
        extra={"parameter_bytes": 4 * 2**20},
    )


def test_projection_rows_are_labelled_and_have_their_own_baseline():
    measured = gpk.Comparison([_measured("single", 1, 0.1), _measured("data", 2, 0.08)])
    both = measured.project("nvlink4", devices=[1, 2, 4])
    table = both.table
    assert list(table["projected"]) == [False, False, True, True, True, True]
    projected = table[table["projected"]]
    assert set(projected["experiment_id"]) == {"e1:nvlink4"}
    assert (projected["status"] == "ok").all() and projected["reason"].str.contains("nvlink4").all()
    # Each side's speedup is against its own one-device row.
    assert table.loc[~table["projected"], "speedup"].tolist()[0] == 1.0
    one = projected[(projected["strategy"] == "data") & (projected["devices"] == 1)]
    assert one["speedup"].iloc[0] == 1.0
    four = projected[(projected["strategy"] == "data") & (projected["devices"] == 4)]
    assert 3.0 < four["speedup"].iloc[0] <= 4.0
    assert len(measured.results) == 2  # the measured comparison is left as it was


COUNT = pathlib.Path(__file__).parent / "analysis" / "data" / "mlp_jax_count.json"


def test_a_comparison_rebuilt_from_the_log_projects_with_the_step_the_log_counted(tmp_path):
    from gpu_parallel_kit.store import RunLog, WorkCounts

    log = RunLog(tmp_path / "runs.sqlite")
    for row in (_measured("single", 1, 0.0051), _measured("data", 2, 0.004)):
        log.append(row)
    WorkCounts(log).save("mlp-key", "e1", COUNT.read_text())  # as a projection counted it
    rebuilt = gpk.history_comparison(log.path)
    assert [r.run_id for r in rebuilt.results] == ["single1", "data2"]
    rows = [r for r in rebuilt.project("nvlink4", devices=[1, 8]).results if r.projected]
    assert {r.extra["compute_source"] for r in rows} == {"counted: xla cost analysis (jax)"}
    assert all(r.extra["gpu"] == "h100" for r in rows)


def test_an_experiment_the_log_never_counted_falls_back_to_measured_compute_and_says_why(
    tmp_path,
):
    from gpu_parallel_kit.store import RunLog

    log = RunLog(tmp_path / "runs.sqlite")
    log.append(_measured("single", 1, 0.0051))
    rows = [r for r in gpk.history_comparison(log.path).project("pcie4", [2]).results]
    projected = [r for r in rows if r.projected]
    assert {r.extra["compute_source"] for r in projected} == {"measured"}
    assert any("no counted step in runs.sqlite" in a for a in projected[0].extra["assumptions"])


def test_a_fast_test_that_projects_a_compared_experiment_starts_no_counting_child(fake_machine):
    comparison = gpk.Experiment("mlp", steps_per_epoch=2, progress=False).compare(["single"], [1])
    with pytest.raises(AssertionError, match="a fast test started the counting child for mlp"):
        comparison.project("nvlink4", [1, 8])
