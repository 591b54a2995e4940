"""The tensor-parallel layout rules and their traffic counts, on literal layer lists."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.hardware_presets import Interconnect
from gpu_parallel_kit.analysis.cost_model.step_time_model import (
    Workload,
    ring_all_reduce_s,
    single_device,
)
from gpu_parallel_kit.analysis.cost_model.tensor_cost import tensor_parallel
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.sharding.layout import LayerInfo, VariableInfo, derive_layout
from gpu_parallel_kit.sharding.traffic import (
    data_traffic,
    ring_all_reduce_bytes,
    tensor_traffic,
    with_context,
)


def dense(name, fan_in, fan_out, bias=True, kind="dense", out=None, inp=None):
    variables = [VariableInfo(f"{name}/kernel", (fan_in, fan_out), "kernel")]
    if bias:
        variables.append(VariableInfo(f"{name}/bias", (fan_out,), "bias"))
    return LayerInfo(
        name, kind, tuple(variables), in_elements=inp or fan_in, out_elements=out or fan_out
    )


def roles(layout):
    return {p.path: (p.role, p.axes) for p in layout.placements}


def test_a_dense_pair_splits_column_then_row_and_needs_two_all_reduces():
    layout = derive_layout([dense("a", 8, 16), dense("b", 16, 4)], model=2)
    assert roles(layout) == {
        "a/kernel": ("column", (None, "model")),
        "a/bias": ("column", ("model",)),
        "b/kernel": ("row", ("model", None)),
        "b/bias": ("replicated", (None,)),
    }
    assert [(c.layer, c.direction, c.elements_per_sample) for c in layout.collectives] == [
        ("b", "forward", 4),
        ("a", "backward", 8),
    ]


def test_element_wise_layers_may_sit_between_a_pair_but_others_break_it():
    relu = LayerInfo("relu", "elementwise")
    norm = LayerInfo("norm", "other", (VariableInfo("norm/gamma", (16,), "gamma"),))
    kept = derive_layout([dense("a", 8, 16), relu, dense("b", 16, 4)], model=2)
    assert roles(kept)["b/kernel"][0] == "row"
    broken = derive_layout([dense("a", 8, 16), norm, dense("b", 16, 4)], model=2)
    assert {p.role for p in broken.placements} == {"replicated"}


def test_pairs_do_not_overlap_and_a_dimension_the_axis_does_not_divide_stays_whole():
    chain = [dense("a", 8, 16), dense("b", 16, 16), dense("c", 16, 16), dense("d", 16, 3)]
    assert [roles(derive_layout(chain, 2))[f"{n}/kernel"][0] for n in "abcd"] == [
        "column", "row", "column", "row",
    ]  # fmt: skip
    odd = derive_layout([dense("a", 8, 15), dense("b", 15, 4)], model=2)
    assert {p.role for p in odd.placements} == {"replicated"} and odd.collectives == []


def convolution(name, inputs, outputs, size=3):
    kernel = VariableInfo(f"{name}/kernel", (size, size, inputs, outputs), "kernel")
    bias = VariableInfo(f"{name}/bias", (outputs,), "bias")
    return LayerInfo(name, "convolution", (kernel, bias), in_elements=inputs * 64,
                     out_elements=outputs * 64)  # fmt: skip


def test_a_convolution_pair_splits_its_channels_through_pooling_and_batch_norm():
    norm = LayerInfo("bn", "per_channel", (VariableInfo("bn/gamma", (16,), "gamma"),))
    pool = LayerInfo("pool", "per_channel")
    layout = derive_layout([convolution("a", 3, 16), norm, pool, convolution("b", 16, 8)], 2)
    assert roles(layout)["a/kernel"] == ("column", (None, None, None, "model"))
    assert roles(layout)["a/bias"] == ("column", ("model",))
    assert roles(layout)["b/kernel"] == ("row", (None, None, "model", None))
    assert roles(layout)["bn/gamma"][0] == "replicated"  # a per-channel weight stays whole
    assert [(c.layer, c.direction) for c in layout.collectives] == [
        ("b", "forward"), ("a", "backward"),
    ]  # fmt: skip
    # A dense layer after a convolution is no pair (a flatten or a pooling over space between).
    mixed = derive_layout([convolution("a", 3, 16), dense("d", 16, 4)], 2)
    assert {p.role for p in mixed.placements} == {"replicated"}


def test_attention_splits_its_heads_when_the_axis_divides_them():
    def attention(heads):
        variables = (
            VariableInfo("mha/query/kernel", (16, heads, 4), "query/kernel"),
            VariableInfo("mha/query/bias", (heads, 4), "query/bias"),
            VariableInfo("mha/key/kernel", (16, heads, 4), "key/kernel"),
            VariableInfo("mha/value/kernel", (16, heads, 4), "value/kernel"),
            VariableInfo("mha/attention_output/kernel", (heads, 4, 16), "attention_output/kernel"),
            VariableInfo("mha/attention_output/bias", (16,), "attention_output/bias"),
        )
        return LayerInfo(
            "mha", "attention", variables, heads=heads, in_elements=16, out_elements=16
        )

    split = roles(derive_layout([attention(4)], model=4))
    assert split["mha/query/kernel"] == ("heads", (None, "model", None))
    assert split["mha/query/bias"] == ("heads", ("model", None))
    assert split["mha/attention_output/kernel"] == ("heads", ("model", None, None))
    assert split["mha/attention_output/bias"][0] == "replicated"
    assert {role for role, _ in roles(derive_layout([attention(3)], model=2)).values()} == {
        "replicated"
    }


@pytest.mark.parametrize(
    ("shape", "role", "axes"),
    [((512, 64), "vocabulary", ("model", None)), ((511, 64), "features", (None, "model"))],
)
def test_an_embedding_splits_its_vocabulary_else_its_features(shape, role, axes):
    table = LayerInfo("emb", "embedding", (VariableInfo("emb/embeddings", shape, "embeddings"),))
    assert roles(derive_layout([table], model=4))["emb/embeddings"] == (role, axes)


def test_the_users_patterns_match_whole_paths_as_keras_does_and_win():
    layers = [dense("a", 8, 16), dense("b", 16, 4)]
    layout = derive_layout(layers, 2, user=[(".*b/kernel", (None, None)), ("a", ("model",))])
    placed = roles(layout)
    assert placed["b/kernel"] == ("user", (None, None))
    assert placed["a/kernel"][0] == "column"  # "a" alone matches no whole path
    padded = roles(derive_layout(layers, 2, user=[("a/.*", ("model",))]))
    assert padded["a/kernel"] == ("user", ("model", None))  # padded to the kernel's rank


def test_traffic_counts_activations_over_the_model_axis_and_gradients_over_the_data_axis():
    layout = derive_layout([dense("a", 8, 16, bias=False), dense("b", 16, 4, bias=False)], 2)
    alone = tensor_traffic(layout, data=1, global_batch=32)
    assert alone.activation_bytes == (4 + 8) * 32 * 4 and alone.gradient_bytes == 0
    assert alone.traffic_bytes_per_device == ring_all_reduce_bytes(4 * 32 * 4, 2) + (
        ring_all_reduce_bytes(8 * 32 * 4, 2)
    )
    meshed = tensor_traffic(layout, data=2, global_batch=32)
    assert meshed.activation_bytes == alone.activation_bytes // 2  # each replica has half
    assert meshed.gradient_bytes == (8 * 16 + 16 * 4) * 4 // 2  # each device's shards
    assert ring_all_reduce_bytes(100, 4) == 150 and ring_all_reduce_bytes(100, 1) == 0
    assert data_traffic(1000, 4, 3).traffic_bytes_per_device == 1500


def test_a_context_axis_gathers_each_blocks_keys_and_values_and_scatters_their_gradients():
    plain = data_traffic(1000, 4, 3)
    assert with_context(plain, [800, 800], 1) == plain
    split = with_context(plain, [800, 800], 4)
    assert split.context_bytes == 2 * 1600  # gathered in the forward, scattered in the backward
    assert split.reduced_bytes == plain.reduced_bytes + 3200
    # Each gather and each scatter moves (c-1)/c of a block's keys and values per device.
    assert split.traffic_bytes_per_device == plain.traffic_bytes_per_device + 2 * 3 * 1600 // 4
    assert split.collectives == plain.collectives + 4


def test_the_tensor_cost_model_splits_sharded_compute_and_adds_the_all_reduces():
    workload = Workload(forward_s=1e-4, backward_s=2e-4, parameter_bytes=4e6)
    link = Interconnect("test", bandwidth_bytes_s=1e9, latency_s=1e-6)
    free = Interconnect("free", bandwidth_bytes_s=1e30, latency_s=0.0)
    alone = single_device(workload, 64).step_time_s
    ideal = tensor_parallel(workload, 4, free, global_batch=64, collective_bytes_per_sample=())
    assert ideal.step_time_s == pytest.approx(alone / 4) and ideal.speedup == pytest.approx(4)
    half = tensor_parallel(
        workload, 4, free, global_batch=64, collective_bytes_per_sample=(), sharded_share=0.5
    )
    assert half.step_time_s == pytest.approx(alone * (0.5 / 4 + 0.5))
    priced = tensor_parallel(
        workload, 4, link, global_batch=64, collective_bytes_per_sample=(400.0,)
    )
    assert priced.comm_time_s == pytest.approx(ring_all_reduce_s(400.0 * 64, 4, link))
    assert priced.step_time_s == pytest.approx(alone / 4 + priced.comm_time_s)
    with pytest.raises(GpkError, match="data=3 does not divide devices=4"):
        tensor_parallel(workload, 4, link, global_batch=64, collective_bytes_per_sample=(), data=3)
