"""The time panel draws the table's steady-state training time, never a round's compile."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table  # noqa: E402
from gpu_parallel_kit.plots.comparison import comparison_figure, wall_time_figure  # noqa: E402
from gpu_parallel_kit.runs.results.run_result import RunResult  # noqa: E402
from gpu_parallel_kit.runs.scheduling.comparison_rounds import merge_rounds  # noqa: E402

STEPS = 2 * 20  # epochs x steps_per_epoch


def trained(run_id, strategy, step, compile_s, round_of=None, **kw) -> RunResult:
    """A finished round of STEPS steps of `step` seconds whose first steps took `compile_s` more:
    its wall time holds both, as the recorder's does."""
    extra = {} if round_of is None else {"configuration": strategy, "round": list(round_of)}
    return RunResult(
        run_id=run_id,
        experiment_id="exp",
        strategy=strategy,
        devices=1,
        virtual=True,
        status="ok",
        global_batch=64,
        epochs=2,
        steps_per_epoch=20,
        warmup_steps=2,
        step_times_s=(step,) * (STEPS - 2),
        step_time_s=step,
        step_time_spread_s=0.0,
        throughput_samples_s=64 / step,
        wall_time_s=compile_s + STEPS * step,
        compile_time_s=compile_s,
        extra=extra,
        **kw,
    )


def bar_heights(ax) -> list[float]:
    """The drawn bars' heights in x order, in seconds whatever unit the axis names; ghost bars
    (hatched, a run without a figure) left out."""
    bars = sorted((p for p in ax.patches if not p.get_hatch()), key=lambda p: p.get_x())
    scale = 1e-3 if ax.get_ylabel().endswith("(ms)") else 1.0
    assert ax.get_ylabel().endswith(("(ms)", "(s)"))
    return [bar.get_height() * scale for bar in bars]


@pytest.fixture
def compiled_first():
    """Notebook 04's case: `single` compiles for 0.84 s and steps in 8.53 ms; `pipeline` x1
    compiles little and steps twice as slowly."""
    return comparison_table(
        [
            trained("s", "single", 0.00853, 0.84),
            trained("p", "pipeline", 0.0161, 0.05, schedule="gpipe", micro_batches=1),
        ]
    )


def test_the_table_gives_the_median_step_times_the_steps_trained(compiled_first):
    assert list(compiled_first["training_time_s"]) == pytest.approx(
        [0.00853 * STEPS, 0.0161 * STEPS]
    )
    steps = compiled_first["epochs"] * compiled_first["steps_per_epoch"]
    assert list(compiled_first["training_time_s"]) == pytest.approx(
        list(compiled_first["step_time_s"] * steps)
    )
    # A round's wall time holds the compile; the difference is that one-off, not the steps.
    compile_s = compiled_first["wall_time_s"] - compiled_first["training_time_s"]
    assert list(compile_s) == pytest.approx([0.84, 0.05])


@pytest.mark.parametrize("panel", [wall_time_figure, comparison_figure])
def test_bars_are_the_tables_training_time(compiled_first, panel):
    ax = panel(compiled_first).axes[0]
    assert ax.get_title().startswith("Training time, steady state")
    assert bar_heights(ax) == pytest.approx(list(compiled_first["training_time_s"]))
    assert "warm-up and compile left out" in ax.get_xlabel()


def test_a_big_first_compile_does_not_make_the_faster_step_look_slower(compiled_first):
    (ax,) = wall_time_figure(compiled_first).axes
    single, pipeline = bar_heights(ax)
    assert single < pipeline  # 8.53 ms against 16.1 ms a step
    # Round one's wall time would have told the opposite story.
    wall = compiled_first.set_index("strategy")["wall_time_s"]
    assert wall["single"] > wall["pipeline"]


def test_merged_rounds_chart_the_rounds_median_step():
    """Round 1 compiles; round 2 does not. The bar is the rounds' median step over the steps
    trained, the figure the table's step time and speedup come from."""
    rounds = [
        trained("s1", "single", 0.010, 0.84, round_of=(1, 3)),
        trained("s2", "single", 0.008, 0.0, round_of=(2, 3)),
        trained("s3", "single", 0.009, 0.0, round_of=(3, 3)),
    ]
    table = comparison_table([merge_rounds(rounds)])
    assert table["step_time_s"].iloc[0] == pytest.approx(0.009)
    assert table["training_time_s"].iloc[0] == pytest.approx(0.009 * STEPS)
    (ax,) = wall_time_figure(table).axes
    assert bar_heights(ax) == pytest.approx([0.009 * STEPS])


def test_a_run_without_a_step_time_has_no_training_time_and_a_ghost_bar():
    failed = RunResult(
        run_id="d4",
        experiment_id="exp",
        strategy="data",
        devices=4,
        virtual=True,
        status="oom",
        reason="out of memory",
        epochs=2,
        steps_per_epoch=20,
    )
    table = comparison_table([trained("s", "single", 0.01, 0.5), failed])
    assert math.isnan(table["training_time_s"].iloc[1])
    (ax,) = wall_time_figure(table).axes
    assert bar_heights(ax) == pytest.approx([0.01 * STEPS])
    assert [p for p in ax.patches if p.get_hatch()]


def test_training_under_a_second_is_drawn_in_milliseconds(compiled_first):
    (ax,) = wall_time_figure(compiled_first).axes
    assert ax.get_ylabel() == "training time (ms)"  # 0.341 s and 0.644 s trained
    heights = sorted(p.get_height() for p in ax.patches if not p.get_hatch())
    assert heights == pytest.approx(sorted(compiled_first["training_time_s"] * 1e3))


def test_a_run_under_a_second_beside_a_longer_one_is_labelled_in_milliseconds():
    # 40 steps of 0.647 ms: 25.9 ms trained, beside 2 s, on an axis of seconds.
    table = comparison_table([trained("s", "single", 0.05, 0.8), trained("d", "data", 0.000647, 0)])
    for panel in (wall_time_figure, comparison_figure):
        ax = panel(table).axes[0]
        assert ax.get_ylabel() == "training time (s)"
        assert [t.get_text() for t in ax.texts] == ["2 s", "25.9 ms"]
