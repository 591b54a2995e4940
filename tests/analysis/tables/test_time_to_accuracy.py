"""Targets and time to target from literal histories; the convergence columns and figures."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

import gpu_parallel_kit as gpk  # noqa: E402
from gpu_parallel_kit.analysis.tables.comparison_table import (
    ALL_COLUMNS,
    CONVERGENCE_COLUMNS,
    comparison_table,
    format_table,
    markdown_table,
)
from gpu_parallel_kit.analysis.tables.time_to_accuracy import (
    Point,
    convergence_summary,
    metric_series,
    reach_of,
    time_to_target,
)
from gpu_parallel_kit.errors import GpkError  # noqa: E402
from gpu_parallel_kit.plots.convergence import convergence_figure, time_to_target_figure
from gpu_parallel_kit.runs.description.accuracy_target import Target, infer_direction, parse_target
from gpu_parallel_kit.runs.results.run_result import RunResult  # noqa: E402

ACCURACY = Target("val_accuracy", 0.9, "above")


def points(*values, start=1.0):
    return [Point(start + i, 2.0 * (i + 1), v) for i, v in enumerate(values)]


# ---- targets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "direction"),
    [
        ("loss", "below"),
        ("val_loss", "below"),
        ("val_mean_squared_error", "below"),
        ("mae", "below"),
        ("accuracy", "above"),
        ("val_accuracy", "above"),
        ("val_sparse_categorical_accuracy", "above"),
        ("val_auc", "above"),
        ("val_widgets", None),
    ],
)
def test_the_direction_comes_from_the_name(metric, direction):
    assert infer_direction(metric) == direction


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"val_accuracy": 0.9}, Target("val_accuracy", 0.9, "above")),
        ({"val_loss": 0.3}, Target("val_loss", 0.3, "below")),
        ({"val_widgets": (2, "below")}, Target("val_widgets", 2.0, "below")),
        ("val_accuracy=0.9", Target("val_accuracy", 0.9, "above")),
        ("val_loss<=0.25", Target("val_loss", 0.25, "below")),
        ("val_widgets > 3", Target("val_widgets", 3.0, "above")),
        (None, None),
    ],
)
def test_targets_are_read_from_dicts_and_text(given, expected):
    assert parse_target(given) == expected


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"val_widgets": 0.5}, "cannot tell whether it should go up or down"),
        ({"val_accuracy": 0.9, "val_loss": 0.3}, "must name one metric"),
        ({"val_accuracy": "high"}, "needs a finite number"),
        ({"val_accuracy": (0.9, "up")}, "give a number, or"),
        ("accuracy is high", "is not understood; write it like val_accuracy=0.9"),
    ],
)
def test_bad_targets_are_one_sentence(given, message):
    with pytest.raises(GpkError, match=message):
        parse_target(given)


# ---- time to target on literal histories -------------------------------------------------------


def test_reached_at_the_first_point_that_meets_it():
    reach = time_to_target(points(0.5, 0.85, 0.91, 0.95), ACCURACY)
    assert (reach.reached, reach.time_s, reach.epoch) == (True, 6.0, 3.0)


def test_never_reached_has_no_time():
    reach = time_to_target(points(0.5, 0.7, 0.89), ACCURACY)
    assert not reach.reached and reach.time_s is None and reach.epoch is None
    assert reach.recorded


def test_reached_at_the_first_evaluation_gives_that_evaluation_not_zero():
    reach = time_to_target(points(0.95, 0.97), ACCURACY)
    assert (reach.reached, reach.time_s, reach.epoch) == (True, 2.0, 1.0)


def test_a_loss_target_is_met_from_below_and_exactly():
    reach = time_to_target(points(0.9, 0.5, 0.3, 0.2), Target("loss", 0.3, "below"))
    assert reach.epoch == 3.0


def test_nan_never_meets_a_target():
    reach = time_to_target(points(math.nan, 0.95), ACCURACY)
    assert reach.epoch == 2.0


def test_nothing_recorded_is_not_reached_and_says_so():
    reach = time_to_target([], ACCURACY)
    assert not reach.reached and not reach.recorded


def _run(run_id, strategy, devices, accuracies, times, throughput=100.0, **kw):
    evaluations = tuple(
        {"epoch": i + 1.0, "step": 10 * (i + 1), "time_s": t, "val_accuracy": a, "val_loss": 1 - a}
        for i, (a, t) in enumerate(zip(accuracies, times, strict=True))
    )
    fields = dict(
        experiment_id="e",
        virtual=True,
        status="ok",
        global_batch=32 * devices,
        step_time_s=32 * devices / throughput,
        throughput_samples_s=throughput,
        history={"loss": [1 - a for a in accuracies]},
        history_time_s=tuple(times),
        evaluations=evaluations,
        target=ACCURACY.to_dict(),
        scaling="weak",
        lr_scaling="linear",
        lr_factor=float(devices),
        learning_rate=0.1 * devices,
    )
    fields.update(kw)
    return RunResult(run_id=run_id, strategy=strategy, devices=devices, **fields)


def test_validation_metrics_come_from_evaluations_and_training_ones_from_the_history():
    run = _run("s", "single", 1, [0.5, 0.95], [1.0, 2.0])
    assert [p.value for p in metric_series(run, "val_accuracy")] == [0.5, 0.95]
    assert [(p.epoch, p.time_s) for p in metric_series(run, "loss")] == [(1.0, 1.0), (2.0, 2.0)]
    assert metric_series(run, "val_auc") == []
    assert reach_of(run).epoch == 2.0


def _comparison():
    return [
        _run("s", "single", 1, [0.6, 0.8, 0.92, 0.95], [2.0, 4.0, 6.0, 8.0]),
        _run("d2", "data", 2, [0.5, 0.7, 0.85, 0.91], [1.0, 2.0, 3.0, 4.0], throughput=190.0),
        _run("d4", "data", 4, [0.4, 0.5, 0.6, 0.7], [0.6, 1.2, 1.8, 2.4], throughput=350.0),
    ]


def test_the_table_says_when_each_run_reached_the_target_and_its_speedup_in_time():
    df = comparison_table(_comparison()).set_index("run_id")
    assert df.loc["s", "time_to_target_s"] == 6.0 and df.loc["s", "epochs_to_target"] == 3.0
    assert df.loc["d2", "time_to_target_s"] == 4.0 and df.loc["d2", "epochs_to_target"] == 4.0
    assert df.loc["d2", "time_to_target_speedup"] == pytest.approx(1.5)
    assert df.loc["d2", "speedup"] == pytest.approx(1.9)  # samples/s tells another story
    assert df.loc["d4", "target_reached"] == False  # noqa: E712 - pandas' nullable boolean
    assert math.isnan(df.loc["d4", "time_to_target_s"])
    assert math.isnan(df.loc["d4", "time_to_target_speedup"])
    assert df.loc["d4", "learning_rate"] == pytest.approx(0.4)
    assert df.loc["d4", "lr_factor"] == 4.0 and df.loc["d4", "lr_scaling"] == "linear"
    assert df.loc["s", "target"] == "val_accuracy >= 0.9"


def test_not_reached_is_written_in_words_in_the_text_tables():
    df = comparison_table(_comparison())
    terminal = format_table(df)
    assert "to_target_s" in terminal and "not reached" in terminal
    assert "not reached" in markdown_table(df) and "time_to_target_speedup" in markdown_table(df)


def test_runs_without_a_target_leave_the_columns_blank_and_the_text_tables_unchanged():
    plain = RunResult(
        run_id="p", experiment_id="x", strategy="single", devices=1, virtual=False, status="ok"
    )
    df = comparison_table([plain])
    assert list(df.columns) == list(ALL_COLUMNS)
    assert df.loc[0, "target_reached"] is pd.NA and df.loc[0, "target"] == ""
    assert "to_target_s" not in format_table(df)
    assert convergence_summary(df) == ""


def test_a_failed_run_has_no_verdict_on_the_target():
    failed = _run("d2", "data", 2, [0.95], [1.0], status="timeout", reason="too slow")
    df = comparison_table([_comparison()[0], failed]).set_index("run_id")
    assert df.loc["d2", "target_reached"] is pd.NA
    assert math.isnan(df.loc["d2", "time_to_target_s"])


def test_the_baseline_missing_the_target_leaves_no_speedup_in_time():
    runs = _comparison()
    runs[0] = _run("s", "single", 1, [0.5, 0.6], [1.0, 2.0])
    df = comparison_table(runs).set_index("run_id")
    assert df["time_to_target_speedup"].isna().all()


def test_the_summary_names_who_reached_it_and_how_the_rate_was_set():
    text = convergence_summary(comparison_table(_comparison()))
    assert "Target val_accuracy >= 0.9: single×1 in 6 s (epoch 3)" in text
    assert "data×2 in 4 s (epoch 4, 1.50× speedup in time to target)" in text
    assert "data×4 not reached" in text
    assert "linear rule" in text


def test_strong_scaling_says_it_keeps_the_rate():
    runs = [_run("s", "single", 1, [0.95], [1.0], scaling="strong", lr_factor=1.0)]
    assert "Strong scaling keeps the global batch" in convergence_summary(comparison_table(runs))


def test_the_comparison_prints_the_summary_under_the_table():
    cmp = gpk.Comparison(_comparison())
    assert "Target val_accuracy >= 0.9" in repr(cmp)
    assert "data×4 not reached" in cmp.convergence
    assert "data×4 not reached" in cmp._repr_html_()


def test_the_columns_are_a_group_of_their_own_at_the_end():
    assert ALL_COLUMNS[-len(CONVERGENCE_COLUMNS) :] == CONVERGENCE_COLUMNS


def test_results_with_curves_survive_the_json_round_trip():
    run = _comparison()[1]
    back = RunResult.from_json(run.to_json())
    assert back == run
    assert isinstance(back.evaluations, tuple) and isinstance(back.history_time_s, tuple)


# ---- figures -----------------------------------------------------------------------------------


def test_convergence_figure_has_time_and_epoch_panels_per_metric():
    figure = convergence_figure(_comparison(), ["val_accuracy", "loss"])
    axes = figure.get_axes()
    assert len(axes) == 4
    assert "training time" in axes[0].get_xlabel() and axes[1].get_xlabel() == "epoch"
    labels = [line.get_label() for line in axes[0].get_lines()]
    assert any(label.startswith("data×4") and "lr ×4" in label for label in labels)
    assert any("target val_accuracy >= 0.9" in label for label in labels)
    assert figure._repr_png_().startswith(b"\x89PNG")


def test_convergence_figure_defaults_to_the_target_metric_and_says_when_nothing_was_recorded():
    figure = convergence_figure(_comparison())
    assert "val_accuracy" in figure.get_axes()[0].get_title()
    empty = convergence_figure(_comparison(), "val_auc")
    assert "no run recorded val_auc" in empty.get_axes()[0].texts[0].get_text()


def test_time_to_target_figure_draws_not_reached_and_both_speedups():
    figure = gpk.Comparison(_comparison()).plot_time_to_target()
    left, right = figure.get_axes()
    assert any(t.get_text() == "not reached" for t in left.texts)
    assert [t.get_text() for t in right.get_legend().get_texts()] == [
        "samples/s",
        "time to target",
    ]
    assert figure._repr_png_().startswith(b"\x89PNG")


def test_time_to_target_figure_without_a_target_says_how_to_get_one():
    plain = RunResult(
        run_id="p", experiment_id="x", strategy="single", devices=1, virtual=False, status="ok"
    )
    figure = time_to_target_figure(comparison_table([plain]))
    assert "no target" in figure.get_axes()[0].texts[0].get_text()


def test_times_leave_out_the_first_steps_compilation():
    run = _run("s", "single", 1, [0.5, 0.95], [1.0, 2.0], compile_time_s=0.75)
    assert [p.time_s for p in metric_series(run, "val_accuracy")] == [0.25, 1.25]
    assert [p.time_s for p in metric_series(run, "loss")] == [0.25, 1.25]
    assert reach_of(run).time_s == 1.25
