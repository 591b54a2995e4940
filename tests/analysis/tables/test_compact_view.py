"""The compact view: merged cells that read, figures for people, nothing wider than a notebook."""

from __future__ import annotations

from gpu_parallel_kit.analysis.tables.cell_text import (
    bytes_text,
    count_text,
    difference_text,
    ms_text,
    ratio_text,
    share_text,
)
from gpu_parallel_kit.analysis.tables.compact_view import compact_frame, compact_html, notes_lines
from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table, format_table
from gpu_parallel_kit.runs.results.run_result import RunResult

MIB = 2**20


def plain(cells) -> list[str]:
    """Cells with their no-break spaces as spaces."""
    return [cell.replace("\xa0", " ") for cell in cells]


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
        step_times_s=[0.01] * 24,
    )
    fields.update(kw)
    return RunResult(run_id=run_id, strategy=strategy, devices=devices, **fields)


def test_figures_are_written_for_people():
    assert ms_text(0.004723) == "4.72" and ms_text(0.0123456) == "12.3" and ms_text(1.5) == "1,500"
    assert ms_text(float("nan")) == "" and ms_text(None) == ""
    assert bytes_text(1301124.0) == "1.24 MiB" and bytes_text(433704) == "424 KiB"
    assert bytes_text(0) == "0 B" and bytes_text(float("nan")) == ""
    assert share_text(0.428571) == "43%" and share_text(0.002215) == "0.2%"
    assert share_text(0.0) == "0%" and share_text(0.00001) == "0.001%"
    assert count_text(169103.0) == "169k" and count_text(6400.0) == "6,400"
    assert count_text(1_234_567) == "1.23M"
    assert ratio_text(1.6213) == "1.62×" and ratio_text(1.62, 1.481, 1.7549) == "1.62× (1.48–1.75)"
    assert ratio_text(1.62, None, float("nan")) == "1.62×" and ratio_text(float("nan")) == ""


def test_a_difference_at_float32_rounding_says_so():
    assert difference_text(5.960464477539063e-08) == "6e-8 (float32 rounding)"
    assert difference_text(0.0) == "0 (identical)"
    assert difference_text(0.0213) == "0.0213"


def test_projected_rows_name_their_preset_under_the_run():
    table = comparison_table(
        [
            row("s", "single", 1),
            row("d2", "data", 2),
            row("exp:pcie4:data-8", "data", 8, experiment="exp:pcie4", projected=True),
        ]
    )
    frame = compact_frame(table)
    assert plain(frame["run"]) == ["single×1", "data×2", "data×8\n→ pcie4"]
    assert any("not measured" in note for note in notes_lines(table))


def test_cells_merge_what_belongs_together():
    pipeline = row(
        "m2",
        "pipeline",
        2,
        schedule="gpipe",
        micro_batches=4,
        peak_memory_bytes={"a": 300 * MIB},
        extra={"bubble_fraction": 0.22175, "bubble_theoretical": 0.2, "state_bytes": {"a": MIB}},
    )
    table = comparison_table([row("s", "single", 1), pipeline])
    frame = compact_frame(table)
    assert list(frame.columns) == [
        "run", "step (ms)", "samples/s", "speedup", "efficiency", "comm share",
        "bubble (theory)", "memory per device",
    ]  # fmt: skip
    assert plain(frame["run"]) == ["single×1", "pipeline×2\ngpipe, M=4"]
    assert plain(frame["step (ms)"]) == ["10 ± 1.2", "10 ± 1.2"]
    assert "\xa0±\xa0" in frame["step (ms)"][0]  # never broken inside the figure
    assert frame["bubble (theory)"].tolist() == ["", "22% (20%)"]
    assert frame["memory per device"].tolist() == ["", "peak 300 MiB\nstate 1 MiB"]
    assert any("median of 24 timed steps" in note for note in notes_lines(table))


def test_status_and_steps_get_a_column_only_when_they_differ():
    same = compact_frame(comparison_table([row("s", "single", 1), row("d", "data", 2)]))
    assert "status" not in same.columns and "steps timed" not in same.columns
    failed = row("d4", "data", 4, status="oom", step_time_s=None, throughput_samples_s=None)
    mixed = comparison_table(
        [row("s", "single", 1), row("d", "data", 2, step_times_s=[0.01] * 6), failed]
    )
    frame = compact_frame(mixed)
    assert frame["status"].tolist() == ["ok", "ok", "oom"]
    assert frame["steps timed"].tolist() == ["24", "6", ""]
    assert not frame.isin(["nan", "NaN", "<NA>", "None"]).any().any()


def test_speedup_shows_its_interval_where_the_table_has_one():
    table = comparison_table([row("s", "single", 1), row("d", "data", 2, throughput_samples_s=1e4)])
    assert compact_frame(table)["speedup"].tolist() == ["1×", "1.56×"]
    table["speedup_ci_low"] = [None, 1.48]  # the baseline has no interval against itself
    table["speedup_ci_high"] = [None, 1.75]
    assert compact_frame(table)["speedup (95% CI)"].tolist() == ["1×", "1.56×\n(1.48–1.75)"]
    table["speedup_ci_low"] = [None, None]  # the columns there, the figures not: plain
    assert compact_frame(table)["speedup"].tolist() == ["1×", "1.56×"]


def test_backends_are_named_under_the_run_when_mixed():
    table = comparison_table(
        [
            row("s", "single", 1),
            row("j", "single", 1, backend="jax", experiment="exp"),
            row("t", "tensor", 4, backend="jax", mesh="2x2"),
            row("u", "tensor", 4, backend="jax", mesh="1x4"),
        ]
    )
    runs = plain(compact_frame(table)["run"])
    assert runs == ["single×1\ntf", "single×1\njax", "tensor×4\njax · mesh 2x2", "tensor×4\njax"]


def test_below_noise_keeps_its_words_together_and_its_noise_under_them():
    noisy = row("d2", "data", 2, comm_time_s=-0.004, comm_share=-0.4)
    html = compact_html(comparison_table([row("s", "single", 1), noisy]))
    assert "below&nbsp;noise<br><span class='gpk-sub'>(±4 ms)</span>" in html
    assert "<style>" in html and "table.gpk-table" in html


def test_a_run_and_its_details_are_two_lines_in_html():
    html = compact_html(comparison_table([row("m", "pipeline", 2, schedule="1f1b")]))
    assert "pipeline×2<br><span class='gpk-sub'>1f1b</span>" in html


def test_time_to_target_is_one_cell_with_the_epoch_it_was_met_in():
    from gpu_parallel_kit.analysis.tables.compact_view import target_text

    assert target_text({"time_to_target_s": 0.1768, "epochs_to_target": 1.3725}) == (
        "0.177 s, epoch 1.37"
    )
    assert target_text({"target_reached": False, "time_to_target_s": float("nan")}) == "not reached"
    assert target_text({"time_to_target_s": float("nan")}) == ""


def test_an_efficiency_above_ideal_and_a_speedup_within_noise_say_so():
    table = comparison_table([row("s", "single", 1), row("d", "data", 1, throughput_samples_s=7e3)])
    table["speedup_ci_low"] = [float("nan"), 0.97]
    table["speedup_ci_high"] = [float("nan"), 1.21]
    table["above_ideal"] = [False, True]
    frame = compact_frame(table)
    assert plain(frame["speedup (95% CI)"]) == ["1×", "1.09×\n(0.97–1.21)\nwithin noise of 1"]
    assert plain(frame["efficiency"]) == ["100%", "109%\nabove ideal"]
    assert any(note.startswith("above ideal:") for note in notes_lines(table))


def test_rows_on_several_processes_give_every_row_its_workers_and_nodes():
    local = comparison_table([row("s", "single", 1), row("d", "data", 2)])
    assert "workers" not in compact_frame(local).columns
    assert "workers" not in format_table(local).splitlines()[0]
    on_slurm = comparison_table(
        [row("s", "single", 1), row("m", "multiworker", 4, workers=2, nodes=2)]
    )
    frame = compact_frame(on_slurm)
    assert list(frame.columns[:3]) == ["run", "workers", "nodes"]
    assert frame["workers"].tolist() == ["1", "2"] and frame["nodes"].tolist() == ["1", "2"]
    assert plain(frame["run"]) == ["single×1", "multiworker×4"]  # said once, in its column
    header = format_table(on_slurm).splitlines()[0].split()
    assert header[header.index("strategy") + 1 : header.index("devices")] == ["workers", "nodes"]
