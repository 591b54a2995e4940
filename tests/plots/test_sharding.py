"""The tensor-parallel figures, drawn from literal results (no worker)."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.plots.sharding import layout_figure, sharding_cost_figure
from gpu_parallel_kit.runs.results.run_result import RunResult

LAYOUT = [
    {"layer": "up", "variable": "up/kernel", "shape": [64, 512], "axes": ["", "model"],
     "role": "column", "shard_shape": [64, 128]},
    {"layer": "up", "variable": "up/bias", "shape": [512], "axes": ["model"], "role": "column",
     "shard_shape": [128]},
    {"layer": "down", "variable": "down/kernel", "shape": [512, 64], "axes": ["model", ""],
     "role": "row", "shard_shape": [128, 64]},
    {"layer": "logits", "variable": "logits/kernel", "shape": [64, 10], "axes": ["", ""],
     "role": "replicated", "shard_shape": [64, 10]},
]  # fmt: skip


def _result(strategy, devices, mesh="", state=1 << 20, traffic=0, **extra):
    return RunResult(
        run_id=f"{strategy}{devices}{mesh}",
        experiment_id="e",
        strategy=strategy,
        devices=devices,
        virtual=True,
        status="ok",
        backend="jax",
        mesh=mesh,
        step_time_s=0.01,
        throughput_samples_s=100.0,
        extra={
            "state_bytes": {f"/cpu:{i}": state for i in range(devices)},
            "traffic_bytes_per_device": traffic,
            **extra,
        },
    )


def test_the_layout_figure_draws_one_panel_per_kernel_and_names_the_split():
    figure = layout_figure(_result("tensor", 4, "1x4", layout=LAYOUT))
    visible = [axis for axis in figure.axes if axis.get_visible()]
    assert len(visible) == 3  # kernels only: the bias is not drawn
    assert [len(axis.patches) for axis in visible] == [4, 4, 1]
    assert (
        "column split" in visible[0].get_xlabel() and "each device 64×128" in visible[0].get_title()
    )
    assert "replicated" in visible[2].get_xlabel()


def test_the_cost_figure_tells_meshes_apart_and_compares_memory_with_traffic():
    runs = [
        _result("data", 4, traffic=3 << 20),
        _result("tensor", 4, "1x4", state=1 << 18, traffic=1 << 19),
        _result("tensor", 4, "2x2", state=1 << 19, traffic=1 << 19),
    ]
    state_axis, traffic_axis = sharding_cost_figure(runs).axes
    labels = [t.get_text() for t in state_axis.get_xticklabels()]
    assert labels == ["data×4 jax", "tensor×4 jax 1x4", "tensor×4 jax 2x2"]
    assert [round(p.get_height(), 3) for p in state_axis.patches] == [1.0, 0.25, 0.5]
    assert [round(p.get_height(), 3) for p in traffic_axis.patches] == [3.0, 0.5, 0.5]


def test_a_comparison_without_a_tensor_run_says_so_in_one_sentence():
    with pytest.raises(GpkError, match="no finished tensor-parallel run"):
        gpk.Comparison([_result("data", 2)]).plot_layout()
    layout = gpk.Comparison([_result("tensor", 4, "1x4", layout=LAYOUT)]).results[0].layout
    assert list(layout["role"]) == ["column", "column", "row", "replicated"]
    assert layout["axes"].iloc[0] == (None, "model")


def test_the_speedup_lines_join_one_devices_count_per_mesh_and_name_a_2d_mesh():
    rows = [
        _result("single", 1),
        _result("tensor", 2, "1x2"),
        _result("tensor", 4, "1x4"),
        _result("tensor", 4, "2x2"),
    ]
    figure = gpk.Comparison(rows).plot()
    speedup = next(axis for axis in figure.axes if axis.get_title().startswith("Speedup"))
    lines = [line.get_label() for line in speedup.get_lines()]
    assert lines == ["single jax", "tensor jax", "tensor jax 2x2", "ideal"]
