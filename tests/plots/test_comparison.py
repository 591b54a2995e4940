"""Figures from the table: titles name scaling and virtual devices; failures are drawn."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table  # noqa: E402
from gpu_parallel_kit.plots.comparison import (
    comparison_figure,
    speedup_figure,
    throughput_figure,
    wall_time_figure,
)
from gpu_parallel_kit.runs.results.run_result import RunResult  # noqa: E402


def run(run_id, strategy, devices, throughput, virtual=True, **kw) -> RunResult:
    """A finished run of 100 steps of 64 samples at `throughput`."""
    fields = {"status": "ok", "global_batch": 64, "scaling": "strong"}
    fields.update(epochs=1, steps_per_epoch=100)
    fields.update(kw)
    return RunResult(
        run_id=run_id,
        experiment_id="exp",
        strategy=strategy,
        devices=devices,
        virtual=virtual,
        throughput_samples_s=throughput,
        step_time_s=64 / throughput if throughput else None,
        wall_time_s=6400 / throughput if throughput else None,
        **fields,
    )


@pytest.fixture
def table():
    return comparison_table(
        [
            run("s", "single", 1, 100.0),
            run("d2", "data", 2, 180.0),
            run("d4", "data", 4, None, status="oom", reason="out of memory"),
            run("m2", "model", 2, 120.0, schedule="gpipe", micro_batches=4),
        ]
    )


def hatched(ax):
    return [patch for patch in ax.patches if patch.get_hatch()]


def texts(ax):
    return [text.get_text() for text in ax.texts]


@pytest.mark.parametrize("build", [wall_time_figure, throughput_figure])
def test_bar_figure_labels_runs_and_draws_the_failed_one_hatched(table, build):
    figure = build(table)
    assert isinstance(figure, Figure)
    (ax,) = figure.axes
    labels = [label.get_text() for label in ax.get_xticklabels()]
    assert labels == ["single×1", "data×2", "data×4", "model×2"]
    assert len(hatched(ax)) == 1
    assert hatched(ax)[0].get_x() + hatched(ax)[0].get_width() / 2 == pytest.approx(2)
    assert "oom" in texts(ax)
    assert "(virtual devices)" in ax.get_title()
    assert "strong scaling" in ax.get_title()


def test_titles_do_not_claim_virtual_devices_for_real_ones():
    df = comparison_table([run("s", "single", 1, 100.0, virtual=False)])
    for figure in (wall_time_figure(df), throughput_figure(df), speedup_figure(df)):
        assert "(virtual devices)" not in figure.axes[0].get_title()


def test_weak_scaling_is_named_in_the_title():
    df = comparison_table([run("s", "single", 1, 100.0, scaling="weak")])
    assert "weak scaling" in speedup_figure(df).axes[0].get_title()


def test_speedup_figure_has_one_line_per_strategy_and_a_dashed_ideal(table):
    (ax,) = speedup_figure(table).axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"single", "data", "model (gpipe)", "ideal"}
    ideal = lines["ideal"]
    assert ideal.get_linestyle() == "--"
    assert list(ideal.get_xdata()) == [1, 4]
    assert list(ideal.get_ydata()) == [1, 4]
    assert list(lines["data"].get_xdata()) == [2]
    assert list(lines["data"].get_ydata()) == pytest.approx([1.8])
    assert lines["data"].get_marker() == "o"
    assert list(ax.get_xticks()) == [1, 2, 4]
    assert "data×4 (oom)" in ax.get_xlabel()
    assert "(virtual devices)" in ax.get_title()


def test_comparison_figure_puts_three_panels_side_by_side(table):
    figure = comparison_figure(table)
    # The width a notebook shows an output at, at 100 dpi, so its text is not shrunk there.
    assert tuple(figure.get_size_inches()) == pytest.approx((11, 4.4))
    titles = [ax.get_title() for ax in figure.axes]
    assert [title.split("\n")[0] for title in titles] == [
        "Training time, steady state",
        "Throughput",
        "Speedup",
    ]
    assert all("(virtual devices)" in title for title in titles)


def test_figures_of_no_runs_say_so():
    empty = comparison_table([])
    for ax in comparison_figure(empty).axes:
        assert "no runs" in texts(ax)


def test_runs_of_different_scaling_are_separate_lines():
    df = comparison_table(
        [
            run("s", "single", 1, 100.0),
            run("d2", "data", 2, 180.0),
            run("w2", "data", 2, 190.0, scaling="weak"),
        ]
    )
    (ax,) = speedup_figure(df).axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["single, strong", "data, strong", "data, weak", "ideal"]
    assert "strong and weak scaling" in ax.get_title()


def projected(run_id, strategy, devices, throughput, **kw) -> RunResult:
    """A row as analysis/cost_model/projected_rows.py makes it: its own experiment id ending in the
    preset's name."""
    return RunResult(
        run_id=f"exp:nvlink4:{run_id}",
        experiment_id="exp:nvlink4",
        strategy=strategy,
        devices=devices,
        virtual=False,
        status="ok",
        global_batch=64,
        step_time_s=64 / throughput,
        throughput_samples_s=throughput,
        projected=True,
        **kw,
    )


@pytest.fixture
def with_projection():
    return comparison_table(
        [
            run("s", "single", 1, 100.0),
            run("d2", "data", 2, 150.0),
            projected("single-1", "single", 1, 100.0),
            projected("data-2", "data", 2, 199.0),
            projected("data-4", "data", 4, 396.0),
            projected("data-8", "data", 8, 780.0),
        ]
    )


def test_projected_speedups_are_dashed_hollow_and_labelled(with_projection):
    (ax,) = speedup_figure(with_projection).axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"single", "data", "data, projected nvlink4", "ideal"}
    measured, modelled = lines["data"], lines["data, projected nvlink4"]
    assert measured.get_linestyle() == "-"
    assert modelled.get_linestyle() == "--"
    assert modelled.get_markerfacecolor() == "none"
    assert modelled.get_color() == measured.get_color()
    assert list(modelled.get_xdata()) == [2, 4, 8]
    assert list(modelled.get_ydata()) == pytest.approx([1.99, 3.96, 7.8])
    assert list(lines["ideal"].get_xdata()) == [1, 8]
    assert "dashed: projected (nvlink4), not measured" in ax.get_title()


def test_projected_bars_are_tagged_and_pale_and_have_no_training_time(with_projection):
    (ax,) = throughput_figure(with_projection).axes
    # The tag may go on a second line, where the label is wider than its bar.
    labels = [" ".join(label.get_text().split()) for label in ax.get_xticklabels()]
    assert labels[:2] == ["single×1", "data×2"]
    runs = (("single", 1), ("data", 2), ("data", 4), ("data", 8))
    assert labels[2:] == [f"{s}×{n} [nvlink4]" for s, n in runs]
    pale = [bar for bar in ax.patches if bar.get_hatch() == ".."]
    assert len(pale) == 4 and all(bar.get_alpha() == 0.4 for bar in pale)
    assert "pale dotted bars: projected (nvlink4)" in ax.get_title()
    (wall,) = wall_time_figure(with_projection).axes
    assert [label.get_text() for label in wall.get_xticklabels()] == ["single×1", "data×2"]
    assert wall.get_xlabel().split("\n")[1] == "4 projected row(s) not shown: no training time"
    assert not hatched(wall)


def banded(run_id, strategy, devices, throughput, fast, slow) -> RunResult:
    """A counted projection's row: its likely throughput, and its step at the efficiency band's
    high (fast) and low (slow) ends, as analysis/cost_model/projected_compute.py records them."""
    step = 64 / throughput
    extra = {"step_time_low_s": step / fast, "step_time_high_s": step * slow}
    comm = {"comm_time_s": step / 10, "comm_share": 0.1}
    return projected(run_id, strategy, devices, throughput, extra=extra, **comm)


@pytest.fixture
def with_band():
    return comparison_table(
        [
            run("s", "single", 1, 100.0),
            run("d2", "data", 2, 150.0),
            banded("single-1", "single", 1, 100.0, 1.5, 1.5),
            banded("data-2", "data", 2, 190.0, 1.4, 1.5),
            banded("data-4", "data", 4, 360.0, 1.3, 1.5),
        ]
    )


def test_projected_speedups_are_shaded_between_the_band_ends_and_measured_ones_are_not(with_band):
    from matplotlib.collections import PolyCollection

    (ax,) = speedup_figure(with_band).axes
    (shade,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert shade.get_label() == "efficiency band"
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert shade.get_facecolor()[0][:3] == pytest.approx(
        matplotlib.colors.to_rgb(lines["data, projected nvlink4"].get_color())
    )
    low, high = shade.get_paths()[0].get_extents().y0, shade.get_paths()[0].get_extents().y1
    # At the band's fast end communication weighs more: 1.9 × 1.4 / 1.5 and 3.6 × 1.3 / 1.5.
    assert low == pytest.approx(1.9 * 1.4 / 1.5) and high == pytest.approx(3.6)
    assert list(lines["data, projected nvlink4"].get_ydata()) == pytest.approx([1.9, 3.6])


def test_projected_bars_carry_whiskers_and_measured_bars_none(with_band):
    from matplotlib.container import ErrorbarContainer

    (ax,) = throughput_figure(with_band).axes
    (whiskers,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    segments = whiskers.lines[2][0].get_segments()
    assert [s[0][0] for s in segments] == [3.0, 4.0, 5.0]  # the projected bars, after a gap
    ends = [end for s in segments for end in (s[0][1], s[1][1])]
    assert ends == pytest.approx([100 / 1.5, 150.0, 190 / 1.5, 190 * 1.4, 360 / 1.5, 360 * 1.3])
    assert "efficiency band" in ax.get_xlabel()
    # The value of a whiskered bar stands over its whisker, not through its cap.
    (label,) = [t for t in ax.texts if t.get_text() == "360"]
    assert label.xy == pytest.approx((5.0, 360 * 1.3))


def test_figures_without_a_band_draw_none(with_projection):
    from matplotlib.collections import PolyCollection
    from matplotlib.container import ErrorbarContainer

    (speedup,) = speedup_figure(with_projection).axes
    (throughput,) = throughput_figure(with_projection).axes
    assert not [c for c in speedup.collections if isinstance(c, PolyCollection)]
    assert not [c for c in throughput.containers if isinstance(c, ErrorbarContainer)]


def test_the_communication_figure_draws_the_band_of_projected_rows_only(with_band):
    from matplotlib.collections import PolyCollection
    from matplotlib.container import ErrorbarContainer

    from gpu_parallel_kit.plots.communication import communication_figure

    bars, share = communication_figure(with_band).axes
    (whiskers,) = [c for c in bars.containers if isinstance(c, ErrorbarContainer)]
    assert [s[0][0] for s in whiskers.lines[2][0].get_segments()] == [2, 3, 4]  # projected
    (shade,) = [c for c in share.collections if isinstance(c, PolyCollection)]
    assert shade.get_label() == "data, efficiency band"


def test_throughput_bars_a_hundred_times_apart_get_a_log_axis(with_projection):
    (near,) = throughput_figure(with_projection).axes
    assert near.get_yscale() == "linear"
    far = comparison_table(
        [
            run("s", "single", 1, 50_000.0),
            projected("single-1", "single", 1, 1_000_000.0),
            projected("data-8", "data", 8, 5_000_000.0),
        ]
    )
    (ax,) = throughput_figure(far).axes
    assert ax.get_yscale() == "log" and "log scale" in ax.get_ylabel()
    heights = sorted(bar.get_height() for bar in ax.patches if bar.get_height() > 0)
    assert heights == pytest.approx([50_000.0, 1_000_000.0, 5_000_000.0])  # the table's values


def test_dispatched_experts_are_their_own_bars_and_line_beside_the_dense_bank():
    from gpu_parallel_kit.plots.communication import communication_figure

    def expert(run_id, devices, kind):
        extra = {"experts": {"kind": kind}}
        return run(run_id, "expert", devices, 100.0, comm_time_s=0.05, comm_share=0.1, extra=extra)

    runs = [expert(f"{k}{d}", d, k) for k in ("dense", "dispatched") for d in (2, 4)]
    bars, share = communication_figure(comparison_table(runs)).axes
    labels = [t.get_text() for t in bars.get_xticklabels()]
    assert labels == [
        "expert×2 dense",
        "expert×4 dense",
        "expert×2 dispatched",
        "expert×4 dispatched",
    ]
    lines = {line.get_label(): line for line in share.lines}
    assert list(lines["expert dense"].get_xdata()) == [2, 4]
    assert list(lines["expert dispatched"].get_xdata()) == [2, 4]
    assert lines["expert dense"].get_marker() != lines["expert dispatched"].get_marker()


def test_an_expert_run_below_its_noise_is_named_with_the_bytes_it_moved():
    from gpu_parallel_kit.plots.communication import communication_figure

    def expert(kind, comm_time_s, moved):
        extra = {"experts": {"kind": kind}, "comm_noise_s": 0.002}
        return run(
            kind,
            "expert",
            4,
            100.0,
            comm_time_s=comm_time_s,
            comm_share=comm_time_s / 0.64,
            comm_bytes=moved,
            extra=extra,
        )

    table = comparison_table([expert("dense", 0.001, 262144), expert("dispatched", 0.05, 245760)])
    bars, share = communication_figure(table).axes
    (hollow,) = [line for line in share.lines if line.get_label() == "expert dense: below noise"]
    assert hollow.get_markerfacecolor() == "none" and list(hollow.get_ydata()) == [0.0]
    assert texts(share) == ["expert dense, 256 KiB: below noise (±2 ms)"]
    assert [t.get_text() for t in share.get_legend().get_texts()] == [
        "expert dispatched",
        "expert dense: below noise",
    ]


def test_the_caption_and_legend_name_only_what_the_expert_runs_measured():
    from gpu_parallel_kit.plots.communication import communication_figure

    def expert(kind):
        extra = {"experts": {"kind": kind}}
        return run(kind, "expert", 4, 100.0, comm_time_s=0.05, comm_share=0.08, extra=extra)

    figure = communication_figure(comparison_table([expert("dense"), expert("dispatched")]))
    caption = figure.get_supxlabel()
    assert "expert dense: the all-reduces" in caption
    assert "expert dispatched: the all-to-alls" in caption
    for absent in ("all-reduce, alternated", "Pipeline", "pipeline", "idle", "bubble", "data:"):
        assert absent not in caption
    bars = figure.axes[0]
    legend = [t.get_text() for t in bars.get_legend().get_texts()]
    assert legend == ["compute", "exposed communication"]
