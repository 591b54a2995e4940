"""The notebook front end's pure helpers, on literal values: no shell, no widget, no worker."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_parallel_kit import GpkError, RunResult
from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table
from gpu_parallel_kit.errors import one_sentence
from gpu_parallel_kit.notebook.controls import device_sets
from gpu_parallel_kit.notebook.names import resolve_data, resolve_model
from gpu_parallel_kit.notebook.views import summary_frame
from gpu_parallel_kit.options.request import MIB, Request
from gpu_parallel_kit.plots.state_and_peak_memory import memory_figure


@pytest.mark.parametrize(
    ("picked", "expected"),
    [
        ([0], [[0]]),
        ([0, 1], [[0], [0, 1]]),
        ([0, 1, 2], [[0], [0, 1], [0, 1, 2]]),
        ([3, 1, 2, 0], [[3], [3, 1], [3, 1, 2, 0]]),
        ([0, 1, 2, 3, 4, 5, 6, 7], [[0], [0, 1], [0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6, 7]]),
        ([1, 1, 3], [[1], [1, 3]]),
        ([], []),
    ],
)
def test_device_sets(picked, expected):
    assert device_sets(picked) == expected


def test_names_resolve_in_the_namespace_first():
    def build():
        return None

    namespace = {
        "build": build,
        "x": np.zeros((4, 2)),
        "y": np.zeros(4),
        "mlp": build,
        "xy": (1, 2),
    }
    assert resolve_model("build", namespace) is build
    assert resolve_model("mlp", namespace) is build  # the user's own `mlp` wins
    assert resolve_model("cnn", namespace) == "cnn"
    assert resolve_model("saved.keras", namespace) == "saved.keras"
    x, y = resolve_data(["x", "y"], namespace)
    assert x is namespace["x"] and y is namespace["y"]
    assert resolve_data(["xy"], namespace) == (1, 2)
    assert resolve_data(["images"], namespace) == "images"
    assert resolve_data(None, namespace) is None
    with pytest.raises(GpkError, match="--data takes one or two names"):
        resolve_data(["x", "y", "z"], namespace)
    with pytest.raises(GpkError, match="model 'buidl' is not defined in this notebook"):
        resolve_model("buidl", namespace)


def test_a_request_is_the_apis_arguments():
    request = Request(model="mlp", memory_budget=64 * MIB, schedule="gpipe", micro_batches=4)
    assert request.plan() == {
        "mode": None,  # the API picks: fit, or explicit for multiworker
        "all_reduce": "auto",
        "schedule": "gpipe",
        "micro_batches": 4,
        "balance": "params",
        "recompute": True,
        "virtual_stages": None,
        "stages": None,  # a pipeline's: devices ÷ (data × model)
        "memory_budget": 64 * 2**20,
        "workers": None,
        "cluster": None,
        "backend": None,  # the experiment's: tensorflow
        "mesh": None,
        "min_shard_bytes": None,  # fsdp's default
        "experts": "dense",  # expert's: keras-hub's bank
        "capacity_factor": 1.25,
        "context": None,  # data, tensor and fsdp on JAX: the long-sequence options, not given
        "sequence_parallel": False,  # a switch: off unless set
        "checkpointing": None,
        "steps_per_execution": None,  # tune's choice
    }
    experiment = request.experiment(progress=False)
    assert experiment.training.batch_size == 256 and experiment.model.name == "mlp"


def test_one_sentence():
    assert one_sentence(GpkError("a\n   b  c")) == "a b c"
    assert one_sentence(RuntimeError()) == "RuntimeError"


def _result(strategy: str, devices: int, status: str = "ok", **extra) -> RunResult:
    names = [f"/cpu:{i}" for i in range(devices)]
    return RunResult(
        run_id=f"{strategy}{devices}",
        experiment_id="e",
        strategy=strategy,
        devices=devices,
        virtual=devices > 1,
        status=status,
        global_batch=64,
        step_time_s=0.01 * devices if status == "ok" else None,
        throughput_samples_s=6400 / devices if status == "ok" else None,
        peak_memory_bytes=dict.fromkeys(names, 300 * MIB) if status == "ok" else {},
        memory_source="process peak rss (shared by all cpu devices)",
        extra={"state_bytes": dict.fromkeys(names, MIB // devices), **extra},
    )


def test_summary_keeps_the_columns_that_answer_which_is_fastest():
    table = comparison_table([_result("single", 1), _result("data", 2)])
    frame = summary_frame(table)
    # No model run: the pipeline columns (schedule, micro-batches, bubble, state) stay out.
    assert list(frame.columns) == [
        "run",
        "step (ms)",
        "samples/s",
        "speedup",
        "efficiency",
        "comm share",
        "peak memory",
    ]
    assert frame["speedup"].tolist() == ["1×", "0.5×"]
    assert frame["peak memory"].tolist() == ["300 MiB", "300 MiB"]


def test_summary_adds_the_pipeline_columns_where_there_is_a_model_run():
    table = comparison_table([_result("single", 1), _result("model", 2)])
    frame = summary_frame(table)
    assert {"bubble (theory)", "memory per device"} <= set(frame.columns)
    assert frame["memory per device"].tolist() == [
        "300 MiB",  # single keeps its whole state: the record does not fill it
        "peak 300 MiB\nstate 512 KiB",
    ]


def test_memory_figure_draws_each_device_of_each_run():
    stages = [
        {"device": "/cpu:0", "activation_bytes_held": MIB},
        {"device": "/cpu:1", "activation_bytes_held": MIB // 2},
    ]
    results = [
        _result("single", 1),
        _result("model", 2, stages=stages),
        _result("data", 4, status="oom"),
    ]
    figure = memory_figure(results)
    state, peak = figure.axes
    heights = [round(p.get_height(), 3) for p in state.patches]
    # Parameters + optimizer state of every device (the oom run's too: it shows why), then the
    # activations stacked on top, held by the pipeline's stages only: only they get that bar.
    assert heights == [1.0, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25] + [1.0, 0.5]
    assert len(peak.patches) == 3  # the oom run measured no peak
    assert "upper bound" in peak.get_title()
