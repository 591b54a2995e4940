"""A comparison in rounds: intervals from steps and rounds, and one row per configuration."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.results.run_result import RunResult
from gpu_parallel_kit.runs.scheduling.comparison_rounds import (
    merge_logged_rounds,
    merge_rounds,
    rounds_to_run,
    tag_round,
)
from gpu_parallel_kit.runs.scheduling.step_intervals import (
    includes_one,
    speedup_interval,
    step_time_interval,
)


def _row(strategy, devices, steps, run_id, batch=64, status="ok"):
    steps = tuple(steps)
    return RunResult(
        run_id=run_id,
        experiment_id="e",
        strategy=strategy,
        devices=devices,
        virtual=devices > 1,
        status=status,
        global_batch=batch,
        step_times_s=steps,
        step_time_s=float(np.median(steps)) if steps else None,
        throughput_samples_s=batch / float(np.median(steps)) if steps else None,
    )


def _rounds(strategy, devices, per_round, batch=64):
    rows = [
        _row(strategy, devices, steps, f"{strategy}{devices}r{i}", batch)
        for i, steps in enumerate(per_round)
    ]
    return [tag_round(r, (i, len(rows), rows[0].run_id)) for i, r in enumerate(rows)]


def test_the_interval_holds_the_median_and_widens_with_drift():
    steady = [[1.0, 1.01, 0.99, 1.0]] * 3
    drifting = [[1.0, 1.01, 0.99, 1.0], [1.3, 1.31, 1.29, 1.3], [0.8, 0.81, 0.79, 0.8]]
    low, high = step_time_interval(steady)
    assert low <= 1.0 <= high
    d_low, d_high = step_time_interval(drifting)
    assert d_high - d_low > 10 * (high - low)  # drift between rounds is doubt, not noise to drop


def test_a_paired_speedup_cancels_drift_that_hit_both_runs():
    base = [[2.0, 2.01, 1.99], [3.0, 3.01, 2.99], [2.5, 2.51, 2.49]]
    faster = [[1.0, 1.01, 0.99], [1.5, 1.51, 1.49], [1.25, 1.26, 1.24]]  # half, every round
    low, high = speedup_interval(base, 64, faster, 64)
    assert 1.9 < low <= 2.0 <= high < 2.1
    assert not includes_one(low, high)
    same_low, same_high = speedup_interval(base, 64, base, 64)
    assert includes_one(same_low, same_high)


def test_merged_rounds_take_the_median_of_medians_and_keep_one_real_run():
    rows = _rounds("data", 2, [[1.0, 1.1], [2.0, 2.1], [1.5, 1.6]])
    merged = merge_rounds(rows)
    assert merged.step_time_s == pytest.approx(1.55)
    assert merged.run_id == rows[2].run_id  # the round nearest the median lends its figures
    assert merged.extra["rounds"] == 3
    assert merged.extra["round_run_ids"] == [r.run_id for r in rows]
    assert merged.step_time_ci_low_s <= merged.step_time_s <= merged.step_time_ci_high_s
    assert merged.throughput_samples_s == pytest.approx(64 / 1.55)


def test_a_failed_round_is_said_and_the_others_still_count():
    rows = _rounds("data", 2, [[1.0, 1.1], [1.2, 1.3]])
    rows[1] = dataclasses.replace(rows[1], status="oom", reason="out of memory", step_times_s=())
    merged = merge_rounds(rows)
    assert merged.ok and merged.extra["rounds_finished"] == 1
    assert merged.extra["failed_rounds"] == ["oom: out of memory"]
    none_finished = [dataclasses.replace(r, status="crashed", step_times_s=()) for r in rows]
    assert merge_rounds(none_finished).status == "crashed"


def test_the_table_carries_speedup_intervals_and_flags_beyond_ideal():
    single = merge_rounds(_rounds("single", 1, [[2.0, 2.02], [2.1, 2.12], [2.05, 2.07]]))
    data = merge_rounds(_rounds("data", 2, [[0.8, 0.81], [0.85, 0.86], [0.82, 0.83]]))
    table = comparison_table([single, data])
    low, high = table.loc[1, ["speedup_ci_low", "speedup_ci_high"]]
    assert low <= table.loc[1, "speedup"] <= high
    assert bool(table.loc[1, "above_ideal"])  # 2.5x on 2 virtual devices: an artefact, flagged
    assert not bool(table.loc[0, "above_ideal"])
    assert table.loc[1, "rounds"] == 3


def test_rows_of_one_run_have_no_interval():
    table = comparison_table([_row("single", 1, [1.0, 1.1], "a"), _row("data", 2, [0.6, 0.7], "b")])
    assert table[["speedup_ci_low", "step_time_ci_low_s"]].isna().all().all()


def test_rounds_default_and_bad_values(monkeypatch):
    monkeypatch.delenv("GPK_ROUNDS", raising=False)
    monkeypatch.delenv("GPK_QUICK", raising=False)
    assert rounds_to_run(None) == 3
    monkeypatch.setenv("GPK_QUICK", "1")
    assert rounds_to_run(None) == 2
    assert rounds_to_run(1) == 1
    assert rounds_to_run(None, to_target=True) == 1  # each round would train to the target
    assert rounds_to_run(3, to_target=True) == 3
    with pytest.raises(GpkError, match="rounds=0"):
        rounds_to_run(0)
    monkeypatch.setenv("GPK_ROUNDS", "many")
    with pytest.raises(GpkError, match="GPK_ROUNDS='many'"):
        rounds_to_run(None)


@pytest.mark.slow
def test_a_comparison_in_rounds_logs_every_round_and_shows_one_row_each(tmp_path):
    import keras

    import gpu_parallel_kit as gpk

    def build():
        return keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])

    rng = np.random.default_rng(1)
    exp = gpk.Experiment(
        model=build,
        data=(rng.normal(size=(96, 4)).astype("float32"), rng.integers(0, 2, size=96)),
        batch_size=16,
        epochs=1,
        optimizer="sgd",
        loss="sparse_categorical_crossentropy",
        progress=False,
        measure_comm=False,
        log=str(tmp_path / "runs.sqlite"),
    )
    rows = exp.compare(["single", "data"], [1, 2], rounds=2).results
    assert [(r.strategy, r.devices, r.extra["rounds"]) for r in rows] == [
        ("single", 1, 2),
        ("data", 1, 2),
        ("data", 2, 2),
    ]
    for row in rows:
        assert row.step_time_ci_low_s <= row.step_time_s <= row.step_time_ci_high_s
    logged = gpk.history(str(tmp_path / "runs.sqlite"), per_round=True)
    assert len(logged) == 6  # every round is a run of its own in the log
    assert len(gpk.history(str(tmp_path / "runs.sqlite"))) == 3  # shown merged, as compared
    table = gpk.Comparison(rows).table
    assert table.loc[1:, ["speedup_ci_low", "speedup_ci_high"]].notna().all().all()


def test_the_log_merges_a_comparisons_rounds_and_leaves_single_runs_alone():
    rounds = _rounds("data", 2, [[1.0, 1.1], [1.2, 1.3]])
    alone = _row("single", 1, [2.0, 2.1], "alone")
    merged = merge_logged_rounds([rounds[0], alone, rounds[1]])
    assert [r.run_id for r in merged] == [rounds[0].run_id, "alone"]
    assert merged[0].extra["rounds"] == 2


def test_the_log_takes_each_rounds_speedup_against_its_own_rounds_baseline():
    """The run log shows every round: round 2's data row is paired with round 2's single, which
    ran slower (drift), not with round 1's; a second comparison's rounds with their own."""
    single = _rounds("single", 1, [[1.0], [2.0]])
    data = _rounds("data", 2, [[0.5], [1.6]])
    again = [
        dataclasses.replace(r, run_id=f"again-{r.run_id}")
        for r in _rounds("single", 1, [[4.0], [8.0]]) + _rounds("data", 2, [[2.0], [2.0]])
    ]
    # the log's order: the rounds in turn, each comparison after the other
    log = [single[0], data[0], single[1], data[1], again[0], again[2], again[1], again[3]]
    table = comparison_table(log).set_index("run_id")
    assert table.loc[data[0].run_id, "speedup"] == pytest.approx(2.0)
    assert table.loc[single[1].run_id, "speedup"] == pytest.approx(1.0)
    assert table.loc[data[1].run_id, "speedup"] == pytest.approx(2.0 / 1.6)
    assert table.loc[again[2].run_id, "speedup"] == pytest.approx(2.0)
    assert table.loc[again[3].run_id, "speedup"] == pytest.approx(4.0)
    merged = comparison_table(merge_logged_rounds(log[:4])).set_index("strategy")
    assert merged.loc["data", "speedup"] == pytest.approx(1.5 / 1.05)  # medians of the rounds
