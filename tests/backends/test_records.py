"""The backend records: looked up by name, refused in one sentence, and drawn apart."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table  # noqa: E402
from gpu_parallel_kit.backends import DEFAULT, JAX, REGISTERED, backend, of_row, tagged  # noqa: E402
from gpu_parallel_kit.errors import GpkError  # noqa: E402
from gpu_parallel_kit.plots.comparison import speedup_figure  # noqa: E402
from gpu_parallel_kit.plots.style import strategy_color  # noqa: E402
from gpu_parallel_kit.runs.processes.entry_points import ENTRIES  # noqa: E402
from gpu_parallel_kit.runs.results.run_result import RunResult  # noqa: E402


def test_an_unknown_backend_is_one_sentence_naming_the_known():
    with pytest.raises(GpkError, match="backend='torch' is not known; use one of tensorflow, jax"):
        backend("torch")


def test_one_backend_is_the_default_and_rows_without_one_ran_on_it():
    assert [r for r in REGISTERED if r.default] == [DEFAULT]
    assert of_row(None) is DEFAULT and of_row(float("nan")) is DEFAULT
    assert not tagged([None, DEFAULT.name]) and tagged([DEFAULT.name, JAX.name])


def test_every_backend_names_entry_points_the_caller_checks():
    for record in REGISTERED:
        assert record.run_entry in ENTRIES and record.discovery_entry in ENTRIES


def _run(run_id, strategy, devices, throughput, backend_name):
    return RunResult(
        run_id=run_id,
        experiment_id="exp",
        strategy=strategy,
        devices=devices,
        virtual=True,
        status="ok",
        global_batch=64,
        scaling="strong",
        epochs=1,
        steps_per_epoch=100,
        throughput_samples_s=throughput,
        step_time_s=64 / throughput,
        wall_time_s=6400 / throughput,
        backend=backend_name,
    )


def test_a_chart_of_both_backends_draws_and_names_them_apart():
    table = comparison_table(
        [
            _run(f"{b}{s}{n}", s, n, t, b)
            for b in ("tensorflow", "jax")
            for s, n, t in (("single", 1, 100.0), ("data", 2, 180.0))
        ]
    )
    (ax,) = speedup_figure(table).axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    tf, jax = lines["data tf"], lines["data jax"]
    assert tf.get_color() != jax.get_color() and tf.get_marker() != jax.get_marker()
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "data tf" in legend and "data jax" in legend


def test_a_chart_of_one_backend_keeps_the_strategy_colours():
    table = comparison_table(
        [_run(f"j{s}", s, n, t, "jax") for s, n, t in (("single", 1, 100.0), ("data", 2, 180.0))]
    )
    (ax,) = speedup_figure(table).axes
    (line,) = [line for line in ax.get_lines() if line.get_label() == "data jax"]
    assert line.get_color() == strategy_color("data")
