"""A comparison table keeps its numbers and shows them for people, in any selection of it."""

from __future__ import annotations

import math

from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table
from gpu_parallel_kit.analysis.tables.readable_frame import RunFrame, readable_cells, time_text
from gpu_parallel_kit.runs.results.run_result import RunResult


def _run(run_id, strategy, devices, **kw):
    fields = dict(
        experiment_id="e", virtual=devices > 1, status="ok", global_batch=512,
        step_time_s=0.008889, throughput_samples_s=57601.0,
    )  # fmt: skip
    fields.update(kw)
    return RunResult(run_id=run_id, strategy=strategy, devices=devices, **fields)


def _table():
    return comparison_table(
        [
            _run("s", "single", 1),
            _run("d", "data", 2, comm_bytes=433704, comm_time_s=0.00001, comm_share=0.428571),
            _run("f", "data", 4, status="oom", reason="need 21.5 MiB of state " + "and more " * 9),
        ]
    )


def test_times_carry_their_unit():
    assert time_text(0.008889) == "8.89 ms" and time_text(12.34) == "12.3 s"
    assert time_text(0.00001) == "10 µs" and time_text(0.0) == "0" and time_text(math.nan) == ""


def test_a_selection_keeps_its_values_and_shows_them_readably():
    table = _table()
    shown = table[["strategy", "step_time_s", "comm_bytes", "comm_time_s", "comm_share", "speedup",
                   "micro_batches", "throughput_samples_s", "virtual"]]  # fmt: skip
    assert isinstance(shown, RunFrame) and shown.loc[0, "step_time_s"] == 0.008889
    cells = readable_cells(shown)
    assert cells.loc[0].tolist() == ["single", "8.89 ms", "", "", "", "1×", "", "57.6k/s", "no"]
    assert cells.loc[1].tolist()[2:6] == ["424 KiB", "10 µs", "43%", "1×"]
    assert not cells.isin(["nan", "NaN", "<NA>", "None"]).any().any()


def test_the_html_shows_a_reason_whole():
    html = _table()[["strategy", "status", "reason"]]._repr_html_()
    assert ("and more " * 9).strip() in html and "..." not in html
    assert "NaN" not in _table()._repr_html_() and "&lt;NA&gt;" not in _table()._repr_html_()


def test_headers_may_break_after_their_underscores_only():
    html = _table()[["strategy", "simulated_step_time_s"]]._repr_html_()
    assert "<th>simulated_<wbr>step_<wbr>time_<wbr>s</th>" in html
    assert "<wbr>" not in html.split("</thead>")[1]  # cells untouched


def test_text_columns_read_from_the_left_in_their_own_table_only():
    html = _table()[["strategy", "devices", "reason"]]._repr_html_()
    name = html.split('id="')[1].split('"')[0]
    assert f"#{name} td:nth-child(1)" in html and f"#{name} td:nth-child(3)" in html
    assert "nth-child(2)" not in html  # devices: a number, right-aligned
    assert name != _table()[["strategy"]]._repr_html_().split('id="')[1].split('"')[0]


def test_a_selection_shows_no_leftover_row_positions():
    table = _table()
    html = table[table["devices"] > 1][["strategy", "devices"]]._repr_html_()
    assert "<th>1</th>" not in html and "<th>2</th>" not in html
    named = table.set_index("strategy")[["devices", "status"]]._repr_html_()
    assert "<th>single</th>" in named  # the labels stay, in the first cell of each row
    assert "td:nth-child(3)" in named and "td:nth-child(2)" not in named  # status, text


def test_large_whole_numbers_read_as_numbers():
    """Notebook 09's `expert_flops` showed 150994944: FLOPs take the rates' units, other whole
    numbers thousands separators."""
    shown = RunFrame(
        {
            "expert_flops": [150994944.0, math.nan],
            "dense_expert_flops": [603979776, 2048],
            "routed_tokens": [16384.0, 4096.0],
            "devices": [2, 4],
        }
    )
    cells = readable_cells(shown)
    assert cells["expert_flops"].tolist() == ["151M", ""]
    assert cells["dense_expert_flops"].tolist() == ["604M", "2,048"]
    assert cells["routed_tokens"].tolist() == ["16,384", "4096"]
    assert cells["devices"].tolist() == ["2", "4"]
    assert "150994944" not in shown._repr_html_()
