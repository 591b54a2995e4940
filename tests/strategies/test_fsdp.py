"""`fsdp` without a worker: its record, refusals, layout rule, traffic counts and cost function,
each checked on hand counts."""

from __future__ import annotations

import re

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.analysis.cost_model.hardware_presets import Interconnect
from gpu_parallel_kit.analysis.cost_model.step_time_model import Workload, data_parallel
from gpu_parallel_kit.analysis.cost_model.strategy_projectors import sharded_data_parallel
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.sharding.layout import Collective, Layout, Placement
from gpu_parallel_kit.sharding.traffic import data_traffic
from gpu_parallel_kit.strategies import GridCell, check_backend, strategy_record
from gpu_parallel_kit.strategies.fsdp import (
    MIN_SHARD_BYTES,
    fsdp_traffic,
    held_bytes,
    shard_over_data,
)
from tests.builders import small_data, small_mlp

pytestmark = pytest.mark.usefixtures("fake_machine")
LINK = Interconnect("test", bandwidth_bytes_s=1e9, latency_s=1e-5)


def _layout(model: int = 1) -> Layout:
    return Layout(
        model,
        [
            Placement("d1", "d1/kernel", (64, 32), (None, None), "replicated"),
            Placement("d1", "d1/bias", (32,), (None,), "replicated"),
            Placement("d2", "d2/kernel", (32, 30), (None, None), "replicated"),
        ],
    )


def test_tensorflow_refuses_fsdp_in_one_sentence():
    with pytest.raises(GpkError) as error:
        check_backend("tensorflow", "fsdp")
    message = str(error.value)
    assert "strategy='fsdp' is not available on backend='tensorflow'" in message
    assert "use backend='jax'" in message and message.count(". ") == 0
    exp = gpk.Experiment(small_mlp, small_data(), batch_size=32, progress=False)
    with pytest.raises(GpkError, match="not available on backend='tensorflow'"):
        exp.plan("fsdp", 2)


def test_every_device_is_on_the_data_axis_unless_a_mesh_says_otherwise():
    exp = gpk.Experiment(small_mlp, small_data(), batch_size=32, backend="jax", progress=False)
    spec = exp.plan("fsdp", 4)
    assert spec.mesh_shape == (4, 1) and spec.min_shard_bytes == MIN_SHARD_BYTES
    assert exp.plan("fsdp", 4, mesh=(2, 2), min_shard_bytes=0).mesh_shape == (2, 2)
    assert strategy_record("fsdp").label(spec) == "fsdp×4"


@pytest.mark.parametrize(
    "plan, message",
    [
        (dict(min_shard_bytes=-1), "min_shard_bytes=-1 must be a whole number of bytes"),
        (dict(min_shard_bytes=1.5), "min_shard_bytes=1.5 must be a whole number"),
        (dict(mesh=(3, 1)), "mesh=(3, 1) holds 3 devices but the run has 4"),
    ],
)
def test_bad_fsdp_options_are_one_sentence(plan, message):
    exp = gpk.Experiment(small_mlp, small_data(), batch_size=32, backend="jax", progress=False)
    with pytest.raises(GpkError, match=re.escape(message)):
        exp.plan("fsdp", 4, **plan)


def test_a_batch_the_data_axis_does_not_split_is_refused():
    exp = gpk.Experiment(small_mlp, small_data(), batch_size=30, backend="jax", progress=False)
    with pytest.raises(GpkError, match="batch"):
        exp.plan("fsdp", 4)


def test_grid_rule_needs_several_devices_and_a_mesh_of_its_size():
    fsdp = strategy_record("fsdp")
    assert not fsdp.in_grid(GridCell(1, {}, lambda: "cpu"))
    assert fsdp.in_grid(GridCell(4, {}, lambda: "cpu"))
    assert not fsdp.in_grid(GridCell(2, {"mesh": (2, 2)}, lambda: "cpu"))


def test_large_weights_shard_their_largest_divisible_dimension_and_small_ones_stay_whole():
    sharded = shard_over_data(_layout(), 4, min_shard_bytes=1024)
    axes = sharded.axes_by_path()
    assert axes["d1/kernel"] == ("batch", None)  # 64 is the largest dimension
    assert axes["d1/bias"] == (None,)  # 128 bytes, under the threshold
    assert axes["d2/kernel"] == ("batch", None)  # 30 is not divisible by 4: 32 is taken
    roles = {p.path: p.role for p in sharded.placements}
    assert roles == {"d1/kernel": "sharded", "d1/bias": "replicated", "d2/kernel": "sharded"}
    assert shard_over_data(_layout(), 3, 0).axes_by_path()["d2/kernel"] == (None, "batch")
    assert all(
        a == (None,) * len(a) for a in shard_over_data(_layout(), 1, 0).axes_by_path().values()
    )


def test_hybrid_keeps_the_model_axis_and_adds_the_data_axis_on_a_free_dimension():
    layout = Layout(
        2,
        [
            Placement("d1", "d1/kernel", (64, 32), (None, "model"), "column"),
            Placement("d2", "d2/kernel", (32, 8), ("model", None), "row"),
            Placement("d3", "d3/kernel", (8, 8), ("batch", None), "user"),
        ],
    )
    axes = shard_over_data(layout, 2, 0).axes_by_path()
    assert axes == {
        "d1/kernel": ("batch", "model"),
        "d2/kernel": ("model", "batch"),
        "d3/kernel": ("batch", None),  # the user's placement is kept as given
    }
    placed = shard_over_data(layout, 2, 0).placements
    assert [held_bytes(p, 2, 2) for p in placed] == [64 * 32, 32 * 8, 8 * 8 * 2]


def test_a_sharded_weight_moves_one_and_a_half_times_data_parallels_bytes():
    layout = shard_over_data(_layout(), 4, 1024)
    traffic = fsdp_traffic(layout, 4, global_batch=32)
    kernels = (64 * 32 + 32 * 30) * 4
    assert traffic.all_gather_bytes == 2 * kernels and traffic.reduce_scatter_bytes == kernels
    assert traffic.gradient_bytes == 32 * 4  # the bias, all-reduced
    assert traffic.collectives == 3 * 2 + 1
    data = data_traffic(kernels, 4, 2).traffic_bytes_per_device
    bias = data_traffic(32 * 4, 4, 1).traffic_bytes_per_device
    assert traffic.traffic_bytes_per_device == pytest.approx(1.5 * data + bias, abs=4)
    assert fsdp_traffic(layout, 1, 32).traffic_bytes_per_device == 0


def test_model_axis_all_reduces_are_counted_on_a_hybrid_mesh():
    layout = Layout(2, [], [Collective("d2", "forward", 10, "row-split sum")])
    traffic = fsdp_traffic(layout, 2, global_batch=8)
    assert traffic.activation_bytes == 10 * 4 * 4  # 4 samples per data replica, float32


def test_the_cost_function_on_hand_counts():
    w = Workload(forward_s=1e-3, backward_s=2e-3, parameter_bytes=4e8)
    n, batch = 4, 64
    gather = 1e-5 * 3 + 3 / 4 * 4e8 / 1e9  # α(N-1) + (N-1)/N · S/B
    plain = sharded_data_parallel(w, n, LINK, global_batch=batch)
    assert plain.comm_time_s == pytest.approx(3 * gather)
    assert plain.step_time_s == pytest.approx(3e-3 * batch / n + 3 * gather)
    assert plain.comm_bytes == pytest.approx(3 * 3 * 4e8)
    assert plain.comm_bytes == pytest.approx(
        1.5 * data_parallel(w, n, LINK, global_batch=batch).comm_bytes
    )
    prefetch = sharded_data_parallel(w, n, LINK, global_batch=batch, prefetch=True)
    forward, backward = 1e-3 * 16, 2e-3 * 16
    assert prefetch.step_time_s == pytest.approx(max(forward, gather) + max(backward, 2 * gather))
    assert prefetch.step_time_s < plain.step_time_s
    half = sharded_data_parallel(w, n, LINK, global_batch=batch, sharded_share=0.5)
    assert half.comm_bytes == pytest.approx(3 * (3 * 2e8 + 2 * 2e8))
    with pytest.raises(GpkError, match="sharded_share=2"):
        sharded_data_parallel(w, n, LINK, global_batch=batch, sharded_share=2)


def _measured(run_id, strategy, devices, **extra):
    from gpu_parallel_kit.runs.results.run_result import RunResult

    return RunResult(
        run_id=run_id,
        experiment_id="e1",
        strategy=strategy,
        devices=devices,
        virtual=True,
        status="ok",
        global_batch=256,
        step_time_s=0.1,
        throughput_samples_s=2560.0,
        backend="jax",
        mesh=f"{devices}x1" if devices > 1 else "",
        extra={"parameter_bytes": 4e8, **extra},
    )


def test_fsdp_is_projected_with_and_without_prefetch_from_its_measured_share():
    from gpu_parallel_kit.analysis.cost_model.projected_rows import (
        ProjectionOptions,
        project_results,
    )

    measured = [
        _measured("s", "single", 1),
        _measured("f", "fsdp", 2, all_gather_bytes=2 * 3e8),  # 3/4 of the bytes sharded
    ]
    rows = {r.run_id.split(":")[-1]: r for r in project_results(measured, "pcie4", [8])}
    row = rows["fsdp-8@jax"]
    assert row.projected and row.strategy == "fsdp" and row.mesh == "8x1"
    assert row.comm_bytes == pytest.approx(7 * (3 * 3e8 + 2 * 1e8))
    assert "75% of the parameter bytes sharded" in " ".join(row.extra["assumptions"])
    assert row.extra["step_time_prefetch_s"] < row.extra["step_time_no_prefetch_s"]
    assert row.step_time_s == pytest.approx(row.extra["step_time_no_prefetch_s"])
    hidden = project_results(measured, "pcie4", [8], ProjectionOptions(overlap=True))
    prefetched = next(r for r in hidden if r.strategy == "fsdp")
    assert prefetched.step_time_s == pytest.approx(row.extra["step_time_prefetch_s"])
