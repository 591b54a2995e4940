"""The compact view: projected rows say so, and its HTML stays narrow enough for a notebook."""

from __future__ import annotations

from gpu_parallel_kit.analysis.compact import compact_frame, compact_html, notes_lines
from gpu_parallel_kit.analysis.tables import comparison_table
from gpu_parallel_kit.runs.results import RunResult


def row(run_id, strategy, devices, experiment="exp", projected=False, **kw):
    fields = dict(
        experiment_id=experiment,
        virtual=not projected,
        status="ok",
        global_batch=64,
        step_time_s=0.01,
        step_time_spread_s=0.0012345,
        throughput_samples_s=6400.0,
        projected=projected,
    )
    fields.update(kw)
    return RunResult(run_id=run_id, strategy=strategy, devices=devices, **fields)


def test_projected_rows_name_their_preset_and_measured_ones_stay_blank():
    table = comparison_table(
        [
            row("s", "single", 1),
            row("d2", "data", 2),
            row("exp:pcie4:data-8", "data", 8, experiment="exp:pcie4", projected=True),
        ]
    )
    frame = compact_frame(table)
    assert frame["projected onto"].tolist() == ["", "", "pcie4"]
    assert any("not measured" in note for note in notes_lines(table))


def test_a_measured_comparison_has_no_projection_column():
    frame = compact_frame(comparison_table([row("s", "single", 1), row("d2", "data", 2)]))
    assert "projected onto" not in frame.columns


def test_spread_and_bubble_are_short():
    table = comparison_table(
        [row("s", "single", 1), row("m2", "model", 2, extra={"bubble_fraction": 0.22175})]
    )
    frame = compact_frame(table)
    assert frame["± (ms)"].tolist() == ["1.2", "1.2"]
    assert frame["bubble"].tolist() == ["", "22%"]


def test_below_noise_keeps_its_words_together_and_its_noise_under_them():
    noisy = row("d2", "data", 2, comm_time_s=-0.004, comm_share=-0.4)
    html = compact_html(comparison_table([row("s", "single", 1), noisy]))
    assert "below&nbsp;noise<br>(±4 ms)" in html
    assert "<style>" in html and "table.gpk-table" in html
