"""Figures read right at the size a notebook shows them: structure checked on drawn figures.

Every figure is drawn (Agg), then its artists' bounding boxes are compared: legends never sit on
bars, labels never sit on each other, axis limits hold every bar, lines that share a strategy
differ in colour, notes appear only when what they explain is drawn. No pixels are compared.
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table  # noqa: E402
from gpu_parallel_kit.plots.communication import communication_figure  # noqa: E402
from gpu_parallel_kit.plots.comparison import comparison_figure  # noqa: E402
from gpu_parallel_kit.plots.convergence import (  # noqa: E402
    convergence_figure,
    time_to_target_figure,
)
from gpu_parallel_kit.plots.state_and_peak_memory import memory_figure  # noqa: E402
from gpu_parallel_kit.plots.style import strategy_color  # noqa: E402
from gpu_parallel_kit.runs.description.accuracy_target import Target  # noqa: E402
from gpu_parallel_kit.runs.results.run_result import RunResult  # noqa: E402

MIB = 2**20
NOTEBOOK_WIDTH_IN = 11.0  # what JupyterLab shows an output at, at 100 dpi, before shrinking it
SMALLEST_POINTS = 7.5  # the smallest text a figure may draw once a notebook shrank it


def drawn(figure):
    """The figure laid out and drawn, and its renderer."""
    FigureCanvasAgg(figure)
    figure.canvas.draw()
    return figure.canvas.get_renderer()


def overlaps(a, b) -> bool:
    """True when two display-space boxes share more than a pixel's sliver."""
    return a.x0 < b.x1 - 1 and b.x0 < a.x1 - 1 and a.y0 < b.y1 - 1 and b.y0 < a.y1 - 1


def bars(ax):
    return [p for p in ax.patches if p.get_height() > 0 and p.get_fill()]


def shown_points(figure, text) -> float:
    """The text's size on the screen: a notebook shrinks a figure wider than it to its width."""
    return text.get_fontsize() * min(1.0, NOTEBOOK_WIDTH_IN / figure.get_size_inches()[0])


def visible_texts(figure, renderer):
    return [
        t
        for t in figure.findobj(matplotlib.text.Text)
        if t.get_visible() and t.get_text().strip() and t.get_window_extent(renderer).width > 0
    ]


# ---- builders ----------------------------------------------------------------------------------


def memory_run(strategy, devices, state_mib, held_mib=0.0, status="ok"):
    names = [f"/cpu:{i}" for i in range(devices)]
    stages = (
        [{"device": name, "activation_bytes_held": int(held_mib * MIB)} for name in names]
        if held_mib
        else []
    )
    return RunResult(
        run_id=f"{strategy}{devices}",
        experiment_id="e",
        strategy=strategy,
        devices=devices,
        virtual=True,
        status=status,
        global_batch=256,
        step_time_s=0.01,
        throughput_samples_s=25600.0,
        peak_memory_bytes=dict.fromkeys(names, 400 * MIB),
        memory_source="process peak rss (shared by all cpu devices)",
        extra={"state_bytes": dict.fromkeys(names, int(state_mib * MIB)), "stages": stages},
    )


def measured(run_id, strategy, devices, throughput, **kw):
    fields = dict(
        experiment_id="exp",
        virtual=True,
        status="ok",
        global_batch=512,
        scaling="strong",
        step_time_s=512 / throughput,
        throughput_samples_s=throughput,
        wall_time_s=6 * 512 / throughput,
    )
    fields.update(kw)
    return RunResult(run_id=run_id, strategy=strategy, devices=devices, **fields)


def projected(strategy, devices, throughput, preset="pcie4", **kw):
    return RunResult(
        run_id=f"exp:{preset}:{strategy}-{devices}",
        experiment_id=f"exp:{preset}",
        strategy=strategy,
        devices=devices,
        virtual=False,
        status="ok",
        global_batch=512,
        step_time_s=512 / throughput,
        throughput_samples_s=throughput,
        projected=True,
        **kw,
    )


def notebook_04_projection():
    """What notebook 04 projects: 7 measured rows and 9 projected onto 1, 2, 4, 8 devices."""
    rows = [measured("s", "single", 1, 76_377.0)]
    rows += [measured(f"d{n}", "data", n, 60_000.0 / n**0.5) for n in (1, 2, 4)]
    rows += [
        measured(f"m{n}", "model", n, 35_000.0 / n**0.3, schedule="gpipe", micro_batches=4)
        for n in (1, 2, 4)
    ]
    rows += [projected("single", 1, 76_377.0)]
    rows += [projected("data", n, 76_377.0 * n * 0.9) for n in (1, 2, 4, 8)]
    rows += [
        projected("model", n, 76_377.0 * (1 + n / 4), schedule="gpipe", micro_batches=4)
        for n in (1, 2, 4, 8)
    ]
    return comparison_table(rows)


def curve_run(run_id, strategy, devices, accuracies, rates=None, **kw):
    evaluations = tuple(
        {
            "epoch": 0.5 * (i + 1),
            "step": 5 * (i + 1),
            "time_s": 0.1 * (i + 1),
            "val_accuracy": a,
            "val_loss": 1 - a,
            "learning_rate": (rates or [0.02] * len(accuracies))[i],
        }
        for i, a in enumerate(accuracies)
    )
    fields = dict(
        experiment_id="e",
        virtual=True,
        status="ok",
        global_batch=32 * devices,
        step_time_s=0.001 * devices,
        throughput_samples_s=32_000.0,
        evaluations=evaluations,
        target=Target("val_accuracy", 0.9, "above").to_dict(),
        scaling="weak",
    )
    fields.update(kw)
    return RunResult(run_id=run_id, strategy=strategy, devices=devices, **fields)


def notebook_05_weak_runs():
    """Notebook 05's grid: single, four data runs (weak, with and without the linear rule)."""
    ramp2, ramp4 = [0.024, 0.032, 0.04, 0.04], [0.045, 0.08, 0.08, 0.08]
    return [
        curve_run("s", "single", 1, [0.6, 0.8, 0.92, 0.95]),
        curve_run("d2", "data", 2, [0.5, 0.7, 0.91, 0.94]),
        curve_run("d4", "data", 4, [0.4, 0.6, 0.8, 0.91]),
        curve_run("l2", "data", 2, [0.55, 0.85, 0.93, 0.95], ramp2, lr_factor=2.0),
        curve_run("l4", "data", 4, [0.5, 0.9, 0.94, 0.96], ramp4, lr_factor=4.0),
    ]


# ---- memory ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "runs",
    [
        # The panel's Compare: every replica holds the whole state, all bars equally tall.
        [memory_run("single", 1, 1.6), *(memory_run("data", n, 1.6) for n in (1, 2, 4))],
        # Notebook 03: the single device holds everything, the stages a quarter plus activations.
        [memory_run("single", 1, 21.5), memory_run("model", 4, 5.5, held_mib=1.0)],
    ],
    ids=["data-x4", "notebook-03"],
)
@pytest.mark.parametrize("budget_mib", [None, 10.75])
def test_the_memory_legend_covers_no_bar_and_every_bar_fits(runs, budget_mib):
    figure = memory_figure(runs, budget_bytes=budget_mib * MIB if budget_mib else None)
    renderer = drawn(figure)
    state, peak = figure.axes
    legend = state.get_legend().get_window_extent(renderer)
    for bar in bars(state):
        assert not overlaps(legend, bar.get_window_extent(renderer)), bar
    for ax in (state, peak):
        tallest = max(bar.get_y() + bar.get_height() for bar in bars(ax))
        assert ax.get_ylim()[1] > tallest  # no bar runs off the top
    labels = [t.get_text() for t in state.get_legend().get_texts()]
    assert ("memory budget" in labels) == (budget_mib is not None)


def test_the_stacked_activations_are_drawn_only_where_a_device_holds_some():
    figure = memory_figure([memory_run("single", 1, 21.5), memory_run("model", 4, 5.5, 1.0)])
    state = figure.axes[0]
    orange = [p for p in state.patches if to_hex(p.get_facecolor()) == to_hex("tab:orange")]
    assert len(orange) == 4  # the four stages; none on the single device


# ---- the comparison's bars -----------------------------------------------------------------------


def test_a_crowded_projection_gives_throughput_a_row_and_labels_that_do_not_collide():
    figure = comparison_figure(notebook_04_projection())
    renderer = drawn(figure)
    wall, speedup, throughput = figure.axes
    assert throughput.get_title().startswith("Throughput")
    # Throughput spans the figure, under the other two panels.
    width = throughput.get_window_extent(renderer).width
    assert width > 1.8 * wall.get_window_extent(renderer).width
    assert throughput.get_position().y1 < wall.get_position().y0
    ticks = [t.get_window_extent(renderer) for t in throughput.get_xticklabels()]
    values = [t.get_window_extent(renderer) for t in throughput.texts]
    assert len(ticks) == 16 and len(values) == 16
    for group in (ticks, values):
        for a, b in itertools.combinations(group, 2):
            assert not overlaps(a, b)
    # Measured and projected bars stand apart: a gap of one slot between the groups.
    positions = sorted(p.get_x() + p.get_width() / 2 for p in throughput.patches)
    assert max(b - a for a, b in itertools.pairwise(positions)) == pytest.approx(2.0)
    top = max(p.get_height() for p in throughput.patches)
    assert throughput.get_ylim()[1] > top


def test_titles_name_how_each_panel_draws_projected_rows():
    figure = comparison_figure(notebook_04_projection())
    wall, speedup, throughput = figure.axes
    # A line too wide for a third of the figure splits after the labels.
    assert "pale dotted bars: projected (pcie4),\nnot measured" in throughput.get_title()
    assert "dashed" not in throughput.get_title()
    assert "dashed: projected (pcie4), not measured" in speedup.get_title()
    dotted = [p for p in throughput.patches if p.get_hatch() == ".."]
    assert len(dotted) == 9


def test_a_comparison_of_a_few_runs_keeps_three_panels_in_a_row():
    table = comparison_table(
        [measured("s", "single", 1, 100.0), *(measured(f"d{n}", "data", n, 90.0) for n in (1, 2))]
    )
    figure = comparison_figure(table)
    drawn(figure)
    assert len({round(ax.get_position().y0, 3) for ax in figure.axes}) == 1


# ---- convergence ---------------------------------------------------------------------------------


def test_runs_that_share_a_strategy_get_colours_of_their_own():
    figure = convergence_figure(notebook_05_weak_runs(), ["val_accuracy", "learning_rate"])
    for ax in figure.axes:
        runs = [line for line in ax.get_lines() if not line.get_label().startswith("target")]
        runs = [line for line in runs if not line.get_label().startswith("_")]
        colours = [to_hex(line.get_color()) for line in runs]
        assert len(runs) == 5 and len(set(colours)) == 5
        single = next(line for line in runs if line.get_label().startswith("single"))
        assert to_hex(single.get_color()) == to_hex(strategy_color("single"))


def test_runs_of_different_strategies_keep_the_strategy_colours():
    runs = notebook_05_weak_runs()[:2]
    (ax, _) = convergence_figure(runs, "val_accuracy").axes
    colours = {line.get_label().split("×")[0]: to_hex(line.get_color()) for line in ax.get_lines()}
    assert colours["data"] == to_hex(strategy_color("data"))


def test_the_convergence_legend_is_one_and_covers_no_panel():
    figure = convergence_figure(notebook_05_weak_runs(), ["val_accuracy", "learning_rate"])
    renderer = drawn(figure)
    assert all(ax.get_legend() is None for ax in figure.axes)
    (legend,) = figure.legends
    box = legend.get_window_extent(renderer)
    for ax in figure.axes:
        assert not overlaps(box, ax.get_window_extent(renderer))
    assert len(legend.get_texts()) == 6  # five runs and the target


def test_the_paired_speedup_labels_do_not_collide():
    figure = time_to_target_figure(comparison_table(notebook_05_weak_runs()))
    renderer = drawn(figure)
    labels = [t.get_window_extent(renderer) for t in figure.axes[1].texts]
    assert len(labels) == 10
    for a, b in itertools.combinations(labels, 2):
        assert not overlaps(a, b)


def test_the_dash_note_appears_only_when_a_dash_is_drawn():
    everyone = notebook_05_weak_runs()
    reached = time_to_target_figure(comparison_table(everyone)).axes[1]
    assert "–" not in "".join(t.get_text() for t in reached.texts)
    assert "–" not in reached.get_title()
    missed = [*everyone[:2], curve_run("d8", "data", 8, [0.3, 0.4, 0.5, 0.6])]
    right = time_to_target_figure(comparison_table(missed)).axes[1]
    assert "–" in [t.get_text() for t in right.texts]
    assert "– in time to target: target not reached" in right.get_title()


# ---- every figure, at notebook size --------------------------------------------------------------


def every_figure():
    runs = notebook_05_weak_runs()
    table = notebook_04_projection()
    return {
        "comparison": comparison_figure(table[~table["projected"]]),
        "comparison, projected": comparison_figure(table),
        "communication": communication_figure(table),
        "convergence": convergence_figure(runs, ["val_accuracy", "learning_rate"]),
        "time to target": time_to_target_figure(comparison_table(runs)),
        "memory": memory_figure([memory_run("single", 1, 21.5), memory_run("model", 4, 5.5, 1)]),
    }


@pytest.mark.parametrize("name", list(every_figure()))
def test_every_figure_fits_a_notebook_and_its_text_stays_readable_there(name):
    figure = every_figure()[name]
    assert figure.get_size_inches()[0] <= NOTEBOOK_WIDTH_IN
    renderer = drawn(figure)
    for text in visible_texts(figure, renderer):
        assert shown_points(figure, text) >= SMALLEST_POINTS, text.get_text()
