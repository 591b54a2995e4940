"""Communication below its own noise: never a negative share, in tables, views, plots or advice."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import gpu_parallel_kit as gpk  # noqa: E402
from gpu_parallel_kit.analysis.tables.compact_view import compact_frame  # noqa: E402
from gpu_parallel_kit.analysis.tables.comparison_table import (
    comparison_table,
    format_table,
    markdown_table,
)  # noqa: E402
from gpu_parallel_kit.runs.results.below_noise import settle_communication  # noqa: E402
from gpu_parallel_kit.runs.results.run_result import RunResult  # noqa: E402


def _data(devices: int, comm: float, noise: float | None = 0.001) -> RunResult:
    step = 0.01
    extra = {} if noise is None else {"comm_noise_s": noise}
    return RunResult(
        run_id=f"d{devices}",
        experiment_id="e",
        strategy="data",
        devices=devices,
        virtual=True,
        status="ok",
        global_batch=256,
        step_time_s=step,
        throughput_samples_s=256 / step,
        comm_time_s=comm,
        comm_share=comm / step,
        extra=extra,
    )


def test_a_negative_figure_moves_signed_into_extra():
    settled = settle_communication(_data(2, -0.004))
    assert settled.comm_time_s is None and settled.comm_share is None
    assert settled.extra["comm_time_raw_s"] == -0.004
    assert settled.extra["comm_share_raw"] == -0.4
    assert settled.extra["comm_below_noise"] is True
    # A figure of -4 ms says the measurement scatters by at least 4 ms.
    assert settled.extra["comm_noise_bound_s"] == 0.004
    assert settled.extra["comm_noise_s"] == 0.001  # as measured
    assert settle_communication(settled) == settled


def test_a_figure_above_its_noise_is_kept():
    result = _data(2, 0.003, noise=0.001)
    assert settle_communication(result) == result


def test_a_positive_figure_under_its_noise_is_below_noise():
    settled = settle_communication(_data(2, 0.0005, noise=0.001))
    assert settled.comm_time_s is None and settled.extra["comm_noise_bound_s"] == 0.001


def test_one_device_data_run_is_the_noise_floor():
    settled = settle_communication(_data(1, 0.003, noise=0.001))
    assert settled.comm_time_s is None and settled.extra["comm_time_raw_s"] == 0.003


def test_tables_and_views_say_below_noise_and_never_show_a_negative_share():
    results = [_data(2, -0.004), _data(4, 0.005)]
    table = comparison_table(results)
    assert not (table["comm_share"] < 0).any()
    assert math.isnan(table["comm_share"].iloc[0]) and table["comm_below_noise"].iloc[0]
    assert table["comm_share"].iloc[1] == 0.5
    assert compact_frame(table)["comm share"].tolist() == ["below noise (±4 ms)", "50%"]
    assert "below noise (±4 ms)" in markdown_table(table)
    assert "-0.4" not in markdown_table(table)


def test_the_terminal_table_has_the_communication_share_and_says_below_noise():
    table = comparison_table([_data(2, -0.004), _data(4, 0.005)])
    header, below, measured = format_table(table).splitlines()
    assert "comm" in header.split()
    start = header.index("comm")
    assert "below noise (±4 ms)" in below
    assert measured[start:].split()[0] == "50%"  # the share, under its header
    assert "-0.4" not in format_table(table)


def test_the_share_plot_draws_no_negative_point_and_labels_noise():
    cmp = gpk.Comparison([_data(2, -0.004), _data(4, 0.005)])
    figure = cmp.plot_communication()
    share = figure.axes[1]
    ys = [y for line in share.get_lines() for y in line.get_ydata()]
    assert ys and min(ys) >= 0
    assert share.get_ylim()[0] == 0
    texts = " ".join(t.get_text() for t in share.texts)
    assert "below noise" in texts
