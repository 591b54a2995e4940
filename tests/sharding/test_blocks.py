"""Tensor-parallel rules inside a Transformer block that is one layer (keras-hub's), on the
weights of Llama, Gemma and BERT blocks as keras-hub 0.32 lays them out; and a pattern's split
that the mesh does not divide."""

from __future__ import annotations

from gpu_parallel_kit.sharding.layout import LayerInfo, VariableInfo, derive_layout, indivisible


def block(name, weights):
    variables = tuple(VariableInfo(f"{name}/{role}", shape, role) for role, shape in weights)
    return LayerInfo(name, "other", variables, in_elements=16 * 32, out_elements=16 * 32)


LLAMA = [  # grouped-query attention (4 query heads, 2 key/value heads), a gated MLP
    ("self_attention/query/kernel", (32, 4, 8)),
    ("self_attention/key/kernel", (32, 2, 8)),
    ("self_attention/value/kernel", (32, 2, 8)),
    ("self_attention/attention_output/kernel", (4, 8, 32)),
    ("self_attention_layernorm/scale", (32,)),
    ("feedforward_intermediate_dense/kernel", (32, 64)),
    ("feedforward_gate_dense/kernel", (32, 64)),
    ("feedforward_output_dense/kernel", (64, 32)),
]
GEMMA = [  # heads first, one key/value head, a gated MLP whose width equals the stream's
    ("attention/query/kernel", (2, 32, 16)),
    ("attention/key/kernel", (1, 32, 16)),
    ("attention/value/kernel", (1, 32, 16)),
    ("attention/attention_output/kernel", (2, 16, 32)),
    ("ffw_gating/kernel", (32, 32)),
    ("ffw_gating_2/kernel", (32, 32)),
    ("ffw_linear/kernel", (32, 32)),
]
BERT = [
    ("self_attention_layer/query/kernel", (32, 2, 16)),
    ("self_attention_layer/query/bias", (2, 16)),
    ("self_attention_layer/attention_output/kernel", (2, 16, 32)),
    ("self_attention_layer/attention_output/bias", (32,)),
    ("feedforward_intermediate_dense/kernel", (32, 64)),
    ("feedforward_intermediate_dense/bias", (64,)),
    ("feedforward_output_dense/kernel", (64, 32)),
    ("feedforward_output_dense/bias", (32,)),
]


def placed(weights, model, name="block"):
    layout = derive_layout([block(name, weights)], model)
    return {p.path.split("/", 1)[1]: (p.role, p.axes) for p in layout.placements}, layout


def test_a_llama_block_splits_heads_and_its_gated_mlp_like_megatron():
    roles, layout = placed(LLAMA, 2)
    assert roles["self_attention/query/kernel"] == ("heads", (None, "model", None))
    assert roles["self_attention/key/kernel"] == ("heads", (None, "model", None))
    assert roles["self_attention/attention_output/kernel"] == ("heads", ("model", None, None))
    assert roles["feedforward_intermediate_dense/kernel"] == ("column", (None, "model"))
    assert roles["feedforward_gate_dense/kernel"] == ("column", (None, "model"))
    assert roles["feedforward_output_dense/kernel"] == ("row", ("model", None))
    assert roles["self_attention_layernorm/scale"] == ("replicated", (None,))
    assert [c.direction for c in layout.collectives] == ["forward", "backward"]


def test_key_and_value_with_fewer_heads_than_devices_stay_whole():
    roles, _ = placed(LLAMA, 4)  # 2 key/value heads over 4 devices
    assert roles["self_attention/query/kernel"][1] == (None, "model", None)
    assert roles["self_attention/key/kernel"] == ("replicated", (None, None, None))


def test_gemmas_heads_first_layout_and_square_mlp_are_read_by_position():
    roles, _ = placed(GEMMA, 2)
    assert roles["attention/query/kernel"] == ("heads", ("model", None, None))
    assert roles["attention/key/kernel"] == ("replicated", (None, None, None))  # one head
    assert roles["ffw_gating/kernel"] == ("column", (None, "model"))
    assert roles["ffw_gating_2/kernel"] == ("column", (None, "model"))
    assert roles["ffw_linear/kernel"] == ("row", ("model", None))


def test_biases_follow_their_kernels():
    roles, _ = placed(BERT, 2)
    assert roles["self_attention_layer/query/bias"] == ("heads", ("model", None))
    assert roles["feedforward_intermediate_dense/bias"] == ("column", ("model",))
    assert roles["feedforward_output_dense/bias"] == ("replicated", (None,))  # added after the sum


def test_a_layer_without_a_block_inside_stays_whole():
    roles, layout = placed([("kernel", (32, 64)), ("bias", (64,))], 2)
    assert {role for role, _ in roles.values()} == {"replicated"} and not layout.collectives


def test_a_patterns_split_the_mesh_does_not_divide_is_found():
    own = [(".*attention/key/kernel", ("model", "batch", None))]
    layout = derive_layout([block("decoder_block_0", GEMMA)], 2, own, "own")
    placement, dimension, axis = indivisible(layout, {"batch": 1, "model": 2})
    assert (placement.path, dimension, axis) == ("decoder_block_0/attention/key/kernel", 0, "model")
    assert indivisible(layout, {"batch": 1, "model": 1}) is None
    assert derive_layout([block("b", GEMMA)], 2).placements[0].role == "heads"  # rules divide
