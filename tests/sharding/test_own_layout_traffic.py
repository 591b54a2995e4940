"""The traffic of a layout that puts weights on the data axis too (a model's own, keras-hub's
`batch` axis on weights): each such weight gathered twice and reduce-scattered, counted in
`comm_bytes` and in the projection."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.hardware_presets import Interconnect
from gpu_parallel_kit.analysis.cost_model.step_time_model import Workload
from gpu_parallel_kit.analysis.cost_model.tensor_cost import tensor_parallel, tensor_predictions
from gpu_parallel_kit.runs.results.run_result import RunResult
from gpu_parallel_kit.sharding.layout import Collective, Layout, Placement
from gpu_parallel_kit.sharding.traffic import ring_all_reduce_bytes, tensor_traffic
from gpu_parallel_kit.strategies.fsdp import fsdp_traffic

# keras-hub's own layout map on a (2, 2) mesh: embeddings ("model", "batch"), a feed-forward
# kernel ("batch", "model"), its bias whole.
OWN = Layout(
    2,
    [
        Placement("emb", "emb/embeddings", (100, 16), ("model", "batch"), "own"),
        Placement("ff", "ff/kernel", (16, 64), ("batch", "model"), "own"),
        Placement("ff", "ff/bias", (64,), (None,), "own"),
    ],
    [Collective("ff", "forward", 16, "row-split sum")],
)


def test_weights_on_the_data_axis_are_gathered_twice_and_reduce_scattered():
    traffic = tensor_traffic(OWN, data=2, global_batch=8)
    shards = (100 * 16 + 16 * 64) * 4 // 2  # each weight's model-axis shard, float32
    assert traffic.all_gather_bytes == 2 * shards and traffic.reduce_scatter_bytes == shards
    assert traffic.gradient_bytes == 64 * 4  # the bias alone is all-reduced
    assert traffic.activation_bytes == 16 * 4 * 4  # 4 samples per data replica
    assert traffic.reduced_bytes == 3 * shards + 64 * 4 + 16 * 4 * 4
    assert traffic.traffic_bytes_per_device == (
        3 * (shards // 2) + ring_all_reduce_bytes(64 * 4, 2) + ring_all_reduce_bytes(16 * 4 * 4, 2)
    )
    assert traffic.collectives == 3 * 2 + 1 + 1
    # The same count as fsdp's: one rule for any layout with weights on the data axis.
    assert fsdp_traffic(OWN, 2, 8) == traffic
    # Without a data axis to gather over there is nothing to gather.
    alone = tensor_traffic(OWN, data=1, global_batch=8)
    assert alone.all_gather_bytes == 0 and alone.gradient_bytes == 0


def test_the_projection_keeps_the_data_axis_and_prices_its_gathers():
    workload = Workload(forward_s=1e-4, backward_s=2e-4, parameter_bytes=4e6)
    link = Interconnect("test", bandwidth_bytes_s=1e9, latency_s=1e-6)
    plain = tensor_parallel(
        workload, 4, link, global_batch=64, collective_bytes_per_sample=(), data=2
    )
    own = tensor_parallel(
        workload,
        4,
        link,
        global_batch=64,
        collective_bytes_per_sample=(),
        data=2,
        gathered_share=1.0,
    )
    assert own.comm_time_s == pytest.approx(1.5 * plain.comm_time_s)
    assert own.comm_bytes == pytest.approx(1.5 * plain.comm_bytes)
    layout = [
        {"shape": [100, 16], "axes": ["model", "batch"]},
        {"shape": [64], "axes": [""]},
    ]
    measured = RunResult(
        run_id="own",
        experiment_id="exp",
        strategy="tensor",
        devices=4,
        virtual=True,
        status="ok",
        global_batch=64,
        mesh="2x2",
        extra={"layout": layout, "collectives": [{"elements_per_sample": 16}]},
    )
    [(p, key, note, mesh)] = tensor_predictions(
        lambda samples: workload, [measured], [4], link, lambda n: 64
    )
    assert mesh == "2x2" and "on the data axis, gathered twice" in note
    assert p.comm_bytes > 0
