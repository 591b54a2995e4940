"""Memory per device by part, from plain rows: what each backend recorded, the fullest device,
the table's columns and the stacked figure."""

from __future__ import annotations

import dataclasses
import itertools
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402

from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table  # noqa: E402
from gpu_parallel_kit.analysis.tables.memory_by_part import (  # noqa: E402
    COMPONENTS,
    component_sources,
    device_components,
    fullest_components,
)
from gpu_parallel_kit.comparison import Comparison  # noqa: E402
from gpu_parallel_kit.runs.results.run_result import RunResult  # noqa: E402


def _row(run_id, strategy, devices, extra, backend="jax"):
    return RunResult(
        run_id=run_id,
        experiment_id="exp",
        strategy=strategy,
        devices=devices,
        virtual=True,
        status="ok",
        global_batch=32,
        step_time_s=0.01,
        throughput_samples_s=3200.0,
        backend=backend,
        extra=extra,
    )


def _jax_memory(per_device):
    return {
        "devices": {
            f"/cpu:{i}": dict(zip(COMPONENTS, parts, strict=True))
            for i, parts in enumerate(per_device)
        },
        "how": {c: "measured" for c in COMPONENTS},
    }


SINGLE = _row("s", "single", 1, {"memory": _jax_memory([(400, 400, 800, 100)])})
FSDP = _row("f", "fsdp", 2, {"memory": _jax_memory([(200, 200, 400, 50), (210, 200, 400, 50)])})
PIPELINE = _row(
    "p",
    "pipeline",
    2,
    {
        "stages": [
            {
                "device": "/cpu:0",
                "parameter_bytes": 300,
                "optimizer_bytes": 600,
                "activation_bytes_held": 70,
            },
            {
                "device": "/cpu:1",
                "parameter_bytes": 100,
                "optimizer_bytes": 200,
                "activation_bytes_held": 30,
            },
        ]
    },
    backend="tensorflow",
)
DATA_TF = _row(
    "d",
    "data",
    2,
    {"state_bytes": {"/cpu:0": 1200, "/cpu:1": 1200}, "parameter_bytes": 400},
    "tensorflow",
)


def test_each_backend_gives_its_parts_per_device():
    assert device_components(FSDP)["/cpu:1"]["params_bytes"] == 210
    stage = device_components(PIPELINE)["/cpu:0"]
    assert (stage["params_bytes"], stage["grads_bytes"], stage["optimizer_bytes"]) == (
        300,
        300,
        600,
    )
    assert stage["activations_bytes"] == 70
    replica = device_components(DATA_TF)["/cpu:1"]
    assert (replica["params_bytes"], replica["optimizer_bytes"]) == (400, 800)
    assert math.isnan(replica["activations_bytes"])
    assert component_sources(DATA_TF)["activations_bytes"].startswith("not known")
    assert device_components(_row("x", "data", 2, {})) == {}


def test_the_fullest_device_fills_the_table():
    assert fullest_components(FSDP)["params_bytes"] == 210
    table = comparison_table([SINGLE, FSDP, PIPELINE, DATA_TF]).set_index("run_id")
    assert table.loc["f", "params_bytes"] == 210 and table.loc["s", "optimizer_bytes"] == 800
    assert table.loc["p", "activations_bytes"] == 70
    assert math.isnan(table.loc["d", "activations_bytes"])


def test_plot_memory_stacks_four_parts_per_run_under_the_devices_memory():
    figure = Comparison([SINGLE, FSDP, PIPELINE, DATA_TF]).plot_memory(device="h100", budget=900)
    axis = figure.axes[0]
    assert len(axis.patches) == 4 * 4
    assert {"h100", "memory budget"} <= {t.get_text() for t in axis.get_legend().get_texts()}
    assert "fsdp×2" in " ".join(t.get_text() for t in axis.get_xticklabels())


def test_plot_memory_with_no_line_across_is_as_tall_as_its_tallest_bar():
    axis = Comparison([SINGLE, FSDP]).plot_memory().axes[0]
    tallest = max(p.get_y() + p.get_height() for p in axis.patches)
    assert tallest > 0 and axis.get_ylim()[1] > tallest


def test_a_run_refused_by_its_budget_is_drawn_faded_at_what_it_needed():
    import dataclasses

    refused = dataclasses.replace(
        DATA_TF,
        run_id="r",
        status="oom",
        extra={"refused": {"state_bytes": {"/cpu:0": 1200}, "parameter_bytes": 400}},
    )
    table = comparison_table([refused]).set_index("run_id")
    assert math.isnan(table.loc["r", "params_bytes"])  # a refused row has no figures
    axis = Comparison([FSDP, refused]).plot_memory(budget=900).axes[0]
    assert len(axis.patches) == 2 * 4
    heights = [p.get_height() for p in axis.patches[1::2]]  # the refused run's parts
    assert sum(heights) * 2**20 == pytest.approx(400 + 400 + 800)
    assert axis.patches[1].get_facecolor()[3] == pytest.approx(0.25)
    assert "refused" in axis.get_xticklabels()[1].get_text()


def test_the_memory_figure_keeps_its_legend_and_labels_inside_and_apart():
    refused = dataclasses.replace(
        SINGLE, run_id="r", status="oom", extra={"refused": SINGLE.extra}, reason="over budget"
    )
    figure = Comparison([refused, PIPELINE]).plot_memory(budget=900)
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    axis = figure.axes[0]
    box = axis.get_window_extent(renderer)
    assert box.width > 0.5 * figure.bbox.width  # not squeezed into a column
    legend = axis.get_legend().get_window_extent(renderer)
    assert box.x0 <= legend.x0 and legend.x1 <= box.x1 and legend.y1 <= box.y1
    ticks = [t.get_window_extent(renderer) for t in axis.get_xticklabels()]
    assert all(a.x1 < b.x0 for a, b in itertools.pairwise(ticks))  # no label over another
    assert max(len(line) for line in axis.get_xlabel().split("\n")) < 100


def test_the_memory_note_names_the_experts_activations_and_no_pipeline_it_does_not_draw():
    def expert(kind, activations):
        memory = _jax_memory([(100, 100, 200, activations)] * 4)
        return _row(kind, "expert", 4, {"memory": memory, "experts": {"kind": kind}})

    axis = Comparison([expert("dense", 900), expert("dispatched", 500)]).plot_memory().axes[0]
    note = axis.get_xlabel().replace("\n", " ")
    assert "a dense expert bank's outputs for every expert and token" in note
    assert "dispatched experts' outputs for their capacity's slots only" in note
    assert "pipeline" not in note
    labels = [t.get_text().replace("\n", " ") for t in axis.get_xticklabels()]
    assert labels == ["expert×4 dense jax", "expert×4 dispatched jax"]
    assert "pipeline" in Comparison([PIPELINE]).plot_memory().axes[0].get_xlabel()
