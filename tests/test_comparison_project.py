"""Comparison.project adds labelled projected rows beside the measured ones, never mixed."""

from __future__ import annotations

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
