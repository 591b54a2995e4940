"""The micro-batch figure drawn from a literal row: the curve, the steps and the M marked."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from gpu_parallel_kit.pipeline.microbatch import Curve, CurvePoint, choose  # noqa: E402
from gpu_parallel_kit.plots.microbatch import microbatch_figure  # noqa: E402
from gpu_parallel_kit.runs.results.run_result import RunResult  # noqa: E402


def row(given="auto") -> RunResult:
    # A fixed cost per task: small micro-batches cost more per sample.
    curve = Curve(
        tuple(
            CurvePoint(s, k, n, (1.0 if k == "F" else 2.0) * (0.004 + 0.001 * n))
            for s in range(2)
            for k in "FB"
            for n in (1, 2, 4, 8, 16)
        )
    )
    choice = choose(curve, "gpipe", 2, 16, given=given)
    return RunResult(
        run_id="r",
        experiment_id="e",
        strategy="pipeline",
        devices=2,
        virtual=True,
        status="ok",
        schedule="gpipe",
        micro_batches=choice.micro_batches,
        global_batch=16,
        extra={"microbatch_curve": curve.to_dict(), "microbatch_choice": choice.to_dict()},
    )


def test_the_figure_shows_the_curve_and_marks_the_chosen_m():
    r = row()
    figure = microbatch_figure(r)
    cost, step = figure.axes
    total = next(line for line in cost.lines if line.get_label() == "all stages")
    assert list(total.get_xdata()) == [1, 2, 4, 8, 16]
    assert total.get_ydata()[0] > total.get_ydata()[-1]  # a sample costs more in small batches
    star = next(line for line in step.lines if "this run" in line.get_label())
    assert list(star.get_xdata()) == [r.micro_batches]
    assert "auto chose M=" in figure._suptitle.get_text()


def test_a_given_m_shows_autos_m_beside_it():
    figure = microbatch_figure(row(given=16))
    labels = [line.get_label() for line in figure.axes[1].lines]
    assert "M=16 (this run)" in labels and "auto's M" in labels


def test_a_run_without_a_curve_is_one_sentence():
    bare = RunResult(
        run_id="d", experiment_id="e", strategy="data", devices=2, virtual=True, status="ok"
    )
    with pytest.raises(ValueError, match="run d measured no micro-batch curve"):
        microbatch_figure(bare)
