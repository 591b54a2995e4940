"""The run log: SQLite round trip, insertion order, GPK_LOG, and a missing log."""

from __future__ import annotations

import sqlite3
import threading

import pandas as pd
import pytest

from gpu_parallel_kit.analysis.tables.comparison_table import ALL_COLUMNS
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.results.run_result import RunResult
from gpu_parallel_kit.runs.scheduling.comparison_rounds import tag_round
from gpu_parallel_kit.store import RunLog, WorkCounts, history


def result(run_id: str = "r1", **kw) -> RunResult:
    fields = {
        "experiment_id": "exp",
        "strategy": "pipeline",
        "devices": 2,
        "virtual": True,
        "status": "ok",
        "global_batch": 64,
        "created_at": "2025-01-02T03:04:05",
    }
    fields.update(kw)
    return RunResult(run_id=run_id, **fields)


def detailed() -> RunResult:
    return result(
        device_names=("/device:CPU:0", "/device:CPU:1"),
        step_times_s=(0.5, 0.25, 0.125),
        epoch_times_s=(1.5,),
        step_time_s=0.25,
        throughput_samples_s=256.0,
        peak_memory_bytes={"/device:CPU:0": 1024, "/device:CPU:1": 2048},
        history={"loss": [0.9, 0.5]},
        versions={"python": "3.11"},
        extra={"stages": {"0": ["dense", "dense_1"], "1": ["out"]}, "bubble_fraction": 0.2},
        schedule="gpipe",
        micro_batches=4,
    )


def test_round_trip_keeps_nested_and_tuple_fields(tmp_path):
    log = RunLog(tmp_path / "log.sqlite")
    original = detailed()
    log.append(original)
    (loaded,) = log.results()
    assert loaded == original
    assert isinstance(loaded.step_times_s, tuple)
    assert loaded.extra["stages"]["0"] == ["dense", "dense_1"]


def test_rows_are_plain_sqlite_with_json_text(tmp_path):
    path = tmp_path / "log.sqlite"
    RunLog(path).append(detailed())
    with sqlite3.connect(path) as connection:
        row = connection.execute(
            "SELECT run_id, experiment_id, created_at, strategy, devices, status,"
            " typeof(devices), result_json FROM runs"
        ).fetchone()
    assert row[:7] == ("r1", "exp", "2025-01-02T03:04:05", "pipeline", 2, "ok", "integer")
    assert row[7].startswith("{")
    assert RunResult.from_json(row[7]) == detailed()


def test_results_come_back_in_insertion_order(tmp_path):
    log = RunLog(tmp_path / "log.sqlite")
    for run_id in ("b", "c", "a"):
        log.append(result(run_id))
    assert [r.run_id for r in log.results()] == ["b", "c", "a"]


def test_a_run_id_is_stored_once(tmp_path):
    log = RunLog(tmp_path / "log.sqlite")
    log.append(result("same"))
    with pytest.raises(GpkError, match="run_id='same' is already in the run log"):
        log.append(result("same", status="failed", reason="again"))
    assert [r.status for r in log.results()] == ["ok"]


def test_table_computes_speedup_and_keeps_experiment_and_time(tmp_path):
    log = RunLog(tmp_path / "log.sqlite")
    log.append(result("s", strategy="single", devices=1, throughput_samples_s=100.0))
    log.append(result("d", strategy="data", devices=2, throughput_samples_s=150.0))
    df = log.table()
    assert list(df["speedup"]) == pytest.approx([1.0, 1.5])
    assert list(df["experiment_id"]) == ["exp", "exp"]
    assert list(df["created_at"]) == ["2025-01-02T03:04:05"] * 2


def _rounds_of(strategy: str, devices: int, steps: list[float]) -> list[RunResult]:
    first = f"{strategy}{devices}r0"
    return [
        tag_round(
            result(
                f"{strategy}{devices}r{i}",
                strategy=strategy,
                devices=devices,
                step_times_s=(step, step),
                step_time_s=step,
                throughput_samples_s=64 / step,
            ),
            (i, len(steps), first),
        )
        for i, step in enumerate(steps)
    ]


def test_history_shows_one_row_per_configuration_and_each_round_when_asked(tmp_path):
    log = RunLog(tmp_path / "log.sqlite")
    single, data = _rounds_of("single", 1, [1.0, 1.2, 1.1]), _rounds_of("data", 2, [0.6, 0.5, 0.7])
    for pair in zip(single, data, strict=True):  # the order a comparison in rounds logs them
        for row in pair:
            log.append(row)
    log.append(result("alone", strategy="data", devices=4, experiment_id="later"))
    merged = history(log.path)
    rows = list(zip(merged["strategy"], merged["devices"], strict=True))
    assert rows == [("single", 1), ("data", 2), ("data", 4)]  # one per configuration
    assert list(merged["rounds"].iloc[:2]) == [3, 3]
    assert list(merged["step_time_s"].iloc[:2]) == pytest.approx([1.1, 0.6])
    per_round = history(log.path, per_round=True)
    assert len(per_round) == 7  # one per run
    assert list(per_round["run_id"]) == [r.run_id for r in log.results()]


def test_history_of_a_missing_log_is_empty_with_columns_and_creates_nothing(tmp_path):
    path = tmp_path / "nothing.sqlite"
    df = history(path)
    assert df.empty
    assert list(df.columns) == list(ALL_COLUMNS)
    assert not path.exists()


def test_default_log_is_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("GPK_LOG", raising=False)
    monkeypatch.chdir(tmp_path)
    RunLog().append(result())
    assert (tmp_path / "gpk_runs.sqlite").exists()
    assert list(history()["run_id"]) == ["r1"]


def test_gpk_log_is_read_at_call_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "elsewhere" / "mine.sqlite"
    monkeypatch.setenv("GPK_LOG", str(target))
    RunLog().append(result())
    assert target.exists()
    assert not (tmp_path / "gpk_runs.sqlite").exists()
    assert list(history()["run_id"]) == ["r1"]


def test_a_file_that_is_not_sqlite_is_explained(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("not a database, just notes " * 100)
    with pytest.raises(GpkError, match="not a gpk run log"):
        RunLog(path).results()
    with pytest.raises(GpkError, match="GPK_LOG"):
        RunLog(path).append(result())


def test_concurrent_writers_lose_no_run(tmp_path):
    path = tmp_path / "log.sqlite"

    def write(worker: int) -> None:
        log = RunLog(path)
        for index in range(10):
            log.append(result(f"w{worker}-{index}"))

    threads = [threading.Thread(target=write, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(RunLog(path).results()) == 40


def test_rows_logged_under_the_old_pipeline_names_read_back_under_the_new(tmp_path):
    log = RunLog(tmp_path / "runs.sqlite")
    log.append(result("old", strategy="model"))
    log.append(result("hybrid", strategy="data+model", projected=True))
    log.append(result("gone", strategy="zero"))  # a name no record knows stays as it was
    assert [r.strategy for r in log.results()] == ["pipeline", "data+pipeline", "zero"]
    assert list(history(log.path)["strategy"]) == ["pipeline", "data+pipeline", "zero"]


def test_memory_log_keeps_rows_and_writes_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = RunLog(":memory:")
    log.append(detailed())
    log.append(result("r2"))
    WorkCounts(log).save("key", "exp", '{"flops": 1}')
    assert list(tmp_path.iterdir()) == []
    assert [r.run_id for r in log.results()] == ["r1", "r2"]
    assert WorkCounts(log).by_experiment("exp") == '{"flops": 1}'
    assert RunLog(":memory:").results() == []  # each in-memory log is its own


def test_history_shows_the_searched_plan_a_run_ran(tmp_path):
    ran = {
        "data": 2, "tensor": 2, "stages": 1, "sharding": "none", "micro_batch_size": 4,
        "micro_batches": 1, "schedule": "-", "virtual_stages": 1, "checkpointing": "none",
        "scaled": "data 8 -> 2; blocks 2 -> 1",
    }  # fmt: skip
    log = RunLog(tmp_path / "log.sqlite")
    log.append(result("plain", strategy="single", devices=1, throughput_samples_s=100.0))
    log.append(result("plan", strategy="tensor", devices=4, mesh="2x2", extra={"plan": ran}))
    table = history(tmp_path / "log.sqlite")
    row = table.iloc[1]
    assert (row["data"], row["tensor"], row["stages"]) == (2, 2, 1)
    assert row["sharding"] == "none" and row["micro_batch_size"] == 4
    assert row["scaled"] == "data 8 -> 2; blocks 2 -> 1" and pd.isna(table["scaled"].iloc[0])
    assert table.columns.get_loc("scaled") > table.columns.get_loc("devices")
    assert "scaled" not in history(tmp_path / "none.sqlite").columns  # no plan, no column
