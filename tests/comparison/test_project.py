"""Comparison.project adds labelled projected rows beside the measured ones, never mixed."""

from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.runs.results.run_result import RunResult


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


COUNT = pathlib.Path(__file__).parents[1] / "analysis" / "data" / "mlp_jax_count.json"


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


def _steps(comparison: gpk.Comparison) -> dict[str, tuple[float, str]]:
    return {
        r.run_id: (r.step_time_s, r.extra["compute_source"])
        for r in comparison.project("nvlink4", [1, 2, 8]).results
        if r.projected
    }


def test_a_comparison_rebuilt_from_a_compared_experiments_rows_projects_as_it_does(
    fake_machine, monkeypatch, tmp_path
):
    from tests.builders import instant_result

    fake_machine.answer(lambda spec: instant_result(spec, extra={"parameter_bytes": 4 * 2**20}))
    counted = json.loads(COUNT.read_text())
    monkeypatch.setattr("gpu_parallel_kit.api.count_in_child", lambda spec, batches: counted)
    exp = gpk.Experiment("mlp", steps_per_epoch=2, progress=False, log=str(tmp_path / "r.sqlite"))
    compared = exp.compare(["single", "data"], [1, 2])
    one_more = exp.run("data", 2)
    merged = gpk.Comparison([*compared.results, one_more])
    other = gpk.Comparison([_measured("single", 1, 0.1)])  # another experiment, never counted
    across = gpk.Comparison([*merged.results, *other.results])
    expected = _steps(compared)
    assert {source for _, source in expected.values()} == {"counted: xla cost analysis (jax)"}
    assert _steps(merged) == expected
    assert {k: v for k, v in _steps(across).items() if k in expected} == expected


def test_a_comparison_merged_from_others_keeps_their_counters():
    counted = json.loads(COUNT.read_text())
    first = gpk.Comparison([_measured("single", 1, 0.0051)], counter=lambda eid: counted)
    second = gpk.Comparison([_row("e2", "single", 1, 0.004)], counter=lambda eid: counted)
    merged = gpk.Comparison([*first.results, *second.results])
    assert _steps(merged) == {**_steps(first), **_steps(second)}
    sources = {source for _, source in _steps(merged).values()}
    assert sources == {"counted: xla cost analysis (jax)"}


def _row(experiment_id: str, strategy: str, devices: int, step: float) -> RunResult:
    row = _measured(strategy, devices, step)
    return dataclasses.replace(
        row, run_id=f"{experiment_id}-{row.run_id}", experiment_id=experiment_id
    )


NOT_COUNTED = "compute measured on this CPU, not counted"


def test_a_projection_whose_step_cannot_be_counted_says_so_in_its_rows_titles_and_advice():
    from gpu_parallel_kit.analysis.tables.compact_view import compact_frame

    rows = [_row("uncounted", "single", 1, 0.0058), _row("uncounted", "data", 2, 0.0031)]
    projected = gpk.Comparison(rows).project("nvlink4", [1, 2, 8])
    new = [r for r in projected.results if r.projected]
    assert new and all(NOT_COUNTED in r.reason for r in new)
    assert all(r.extra["compute_source"] == "measured" for r in new)
    table = projected.table
    run_cells = compact_frame(table)["run"]
    assert [NOT_COUNTED in cell for cell in run_cells] == list(table["projected"])
    assert NOT_COUNTED in repr(projected)  # the terminal table keeps the words whole
    assert NOT_COUNTED in projected.advice
    figure = projected.plot()
    titles = [axis.get_title() for axis in figure.axes if axis.get_title()]
    assert titles and any(NOT_COUNTED in t for t in titles)
    assert all(NOT_COUNTED in t for t in titles if "projected" in t)
    communication = projected.plot_communication()
    assert any(NOT_COUNTED in axis.get_title() for axis in communication.axes)


def test_a_counted_projection_says_nothing_of_the_cpu(tmp_path):
    counted = json.loads(COUNT.read_text())
    rows = [_row("e3", "single", 1, 0.0058), _row("e3", "data", 2, 0.0031)]
    projected = gpk.Comparison(rows, counter=lambda eid: counted).project("nvlink4", [1, 8])
    assert NOT_COUNTED not in repr(projected) and NOT_COUNTED not in projected.advice
    assert not any(NOT_COUNTED in r.reason for r in projected.results)
