"""`expert` without a worker: its record, its refusals, and the pure rules that find a mixture of
experts' banks by shape, place them, and count their work and traffic, on hand counts."""

from __future__ import annotations

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.sharding.experts import (
    capacity_per_expert,
    dense_activation_bytes,
    dispatched_activation_bytes,
    expert_layout,
    expert_work,
    find_banks,
    with_experts_split,
)
from gpu_parallel_kit.sharding.layout import LayerInfo, VariableInfo, derive_layout
from gpu_parallel_kit.sharding.traffic import tensor_traffic
from gpu_parallel_kit.strategies import check_backend, options, strategy_record
from tests.builders import small_data, small_mlp

pytestmark = pytest.mark.usefixtures("fake_machine")
WIDTH, FFN, EXPERTS, SEQUENCE = 8, 16, 4, 10


def _variable(role: str, shape: tuple[int, ...]) -> VariableInfo:
    return VariableInfo(f"block/{role}", shape, role)


def _moe_block(experts: int = EXPERTS) -> LayerInfo:
    """A keras-hub-like decoder block: attention, a router and a Mixtral-like bank of 4."""
    variables = (
        _variable("attention/query/kernel", (WIDTH, experts, 2)),  # as many heads as experts
        _variable("attention/attention_output/kernel", (experts, 2, WIDTH)),
        _variable("moe/router/kernel", (WIDTH, experts)),
        _variable("moe/experts/gate", (experts, WIDTH, FFN)),
        _variable("moe/experts/up", (experts, WIDTH, FFN)),
        _variable("moe/experts/down", (experts, FFN, WIDTH)),
        _variable("norm/scale", (WIDTH,)),
    )
    per_sample = SEQUENCE * WIDTH
    return LayerInfo("block", "other", variables, None, per_sample, per_sample)


def _experiment() -> gpk.Experiment:
    return gpk.Experiment(small_mlp, small_data(), batch_size=32, backend="jax", progress=False)


def test_tensorflow_refuses_expert_in_one_sentence_saying_what_to_use():
    with pytest.raises(GpkError) as error:
        check_backend("tensorflow", "expert")
    message = str(error.value)
    assert "strategy='expert' is not available on backend='tensorflow'" in message
    assert "use backend='jax'" in message and message.count(". ") == 0


def test_every_device_is_on_the_expert_axis_unless_a_mesh_says_otherwise():
    exp = _experiment()
    spec = exp.plan("expert", 4)
    assert spec.mesh_shape == (1, 4)
    assert (spec.experts, spec.capacity_factor) == ("dense", 1.25)
    dispatched = exp.plan("expert", 4, mesh=(2, 2), experts="dispatched", capacity_factor=1.0)
    assert dispatched.mesh_shape == (2, 2)
    assert strategy_record("expert").label(dispatched) == "expert×4 mesh 2x2 dispatched c=1"


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (dict(experts="sparse"), "experts='sparse' is not known; use experts='dense'"),
        (dict(capacity_factor=0), "capacity_factor=0 must be a number above 0"),
        (dict(capacity_factor="x"), "capacity_factor='x' is not a number like 1.25"),
        (dict(mesh=(3, 2)), "mesh=(3, 2) holds 6 devices but the run has 4"),
    ],
)
def test_a_bad_option_is_one_sentence_naming_it_and_the_fix(given, words):
    with pytest.raises(GpkError) as error:
        _experiment().plan("expert", 4, **given)
    message = str(error.value)
    assert words in message and message.replace("e.g. ", "").count(". ") == 0


def test_its_options_reach_the_command_line_and_the_api():
    names = {o.name: o for o in options()}
    assert names["experts"].choices == ("dense", "dispatched")
    assert names["capacity_factor"].type("1.5", "capacity_factor") == 1.5


def test_a_bank_is_found_by_its_shapes_beside_its_router_not_its_attention():
    (bank,) = find_banks([_moe_block()])
    assert (bank.experts, bank.width, bank.tokens_per_sample) == (EXPERTS, WIDTH, SEQUENCE)
    assert bank.router == "block/moe/router/kernel"
    assert [k.role for k in bank.kernels] == [
        "moe/experts/gate",
        "moe/experts/up",
        "moe/experts/down",
    ]
    assert bank.parameters_per_expert == 3 * WIDTH * FFN


def test_a_router_in_a_layer_of_its_own_or_beside_the_banks_parent_finds_its_bank():
    """gpt-oss keeps its router Dense inside a router layer, and its experts' biases beside their
    kernels; Gemma 4 keeps its router beside the bank in the decoder block, a per-expert scale in
    the bank. A (width, E) kernel further away (Qwen3.5-MoE's linear attention) is not taken
    for the router, and biases and scales go on the expert axis with their kernels."""
    gpt_oss = LayerInfo("block", "other", (
        _variable("moe/router/router_dense/kernel", (WIDTH, EXPERTS)),
        _variable("moe/experts/gate_up_proj", (EXPERTS, WIDTH, 2 * FFN)),
        _variable("moe/experts/gate_up_proj_bias", (EXPERTS, 2 * FFN)),
        _variable("moe/experts/down_proj", (EXPERTS, FFN, WIDTH)),
        _variable("moe/experts/down_proj_bias", (EXPERTS, WIDTH)),
        _variable("linear_attn/in_proj_b/kernel", (WIDTH, EXPERTS)),
    ), None, SEQUENCE * WIDTH, SEQUENCE * WIDTH)  # fmt: skip
    gemma4 = LayerInfo("block", "other", (
        _variable("attention/query/kernel", (EXPERTS, WIDTH, 2)),
        _variable("moe_router/proj/kernel", (WIDTH, EXPERTS)),
        _variable("moe_expert_bank/gate_proj", (EXPERTS, WIDTH, FFN)),
        _variable("moe_expert_bank/up_proj", (EXPERTS, WIDTH, FFN)),
        _variable("moe_expert_bank/down_proj", (EXPERTS, FFN, WIDTH)),
        _variable("moe_expert_bank/per_expert_scale", (EXPERTS,)),
    ), None, SEQUENCE * WIDTH, SEQUENCE * WIDTH)  # fmt: skip
    (oss,) = find_banks([gpt_oss])
    assert oss.router == "block/moe/router/router_dense/kernel"
    assert [v.role for v in oss.extras] == [
        "moe/experts/gate_up_proj_bias",
        "moe/experts/down_proj_bias",
    ]
    assert oss.parameters_per_expert == 3 * WIDTH * FFN  # the matmuls only
    (gemma,) = find_banks([gemma4])
    assert gemma.router == "block/moe_router/proj/kernel"
    assert [v.role for v in gemma.kernels] == [
        f"moe_expert_bank/{name}" for name in ("gate_proj", "up_proj", "down_proj")
    ]
    axes = expert_layout([gemma4], [gemma], 2).axes_by_path()
    assert axes["block/moe_expert_bank/per_expert_scale"] == ("model",)
    assert axes["block/attention/query/kernel"] == (None, None, None)


def test_a_dense_model_has_no_bank():
    dense = LayerInfo("d", "dense", (_variable("kernel", (WIDTH, EXPERTS)),))
    assert find_banks([dense]) == []


def test_the_experts_go_on_the_expert_axis_and_everything_else_stays_whole():
    block = _moe_block()
    layout = expert_layout([block], find_banks([block]), 2)
    axes = layout.axes_by_path()
    for role in ("gate", "up", "down"):
        assert axes[f"block/moe/experts/{role}"] == ("model", None, None)
    assert axes["block/moe/router/kernel"] == (None, None)
    assert axes["block/attention/query/kernel"] == (None, None, None)
    # the dense bank: its output summed over the expert axis forward, its input's gradient back
    assert [c.direction for c in layout.collectives] == ["forward", "backward"]
    traffic = tensor_traffic(layout, 1, 4)
    assert traffic.activation_bytes == 2 * 4 * SEQUENCE * WIDTH * 4


def test_a_tensor_layouts_model_axis_divides_the_experts_it_left_whole():
    block = _moe_block()
    tensor = derive_layout([block], 2)
    split = with_experts_split(tensor, [block])
    axes = split.axes_by_path()
    for role in ("gate", "up", "down"):
        assert tensor.axes_by_path()[f"block/moe/experts/{role}"] == (None, None, None)
        assert axes[f"block/moe/experts/{role}"] == ("model", None, None)
    assert (
        axes["block/attention/query/kernel"]
        == tensor.axes_by_path()["block/attention/query/kernel"]
    )  # the heads as tensor splits them
    assert len(split.collectives) == len(tensor.collectives) + 2  # the bank's sums, both ways
    # An axis that does not divide the experts leaves them whole, as does one device.
    three = derive_layout([block], 3)
    assert with_experts_split(three, [block]).axes_by_path() == three.axes_by_path()
    assert with_experts_split(derive_layout([block], 1), [block]).collectives == []


def test_a_users_placement_wins_over_the_expert_rule():
    block = _moe_block()
    user = ((".*experts/down", (None, "model", None)),)
    layout = expert_layout([block], find_banks([block]), 2, user)
    assert layout.axes_by_path()["block/moe/experts/down"] == (None, "model", None)


def test_dispatched_experts_move_tokens_by_all_to_all_and_sum_nothing():
    block = _moe_block()
    banks = find_banks([block])
    assert expert_layout([block], banks, 2, dispatched=True).collectives == []
    # 32 samples of 10 tokens on (1, 2): 160 tokens a device, 80 slots an expert at 1.0
    work = expert_work(banks, 32, (1, 2), [2], 1.0)
    assert work.ratio == pytest.approx(2 / EXPERTS)
    assert work.dense_flops == 6 * 320 * EXPERTS * 3 * WIDTH * FFN
    slots = capacity_per_expert(160, 2, EXPERTS, 1.0)
    assert slots == 80
    # four passes, half of each buffer leaving the device
    assert work.all_to_all_bytes == 4 * (slots * EXPERTS * WIDTH * 4) // 2


def test_the_dense_bank_keeps_every_experts_outputs_and_dispatched_only_its_slots():
    (bank,) = find_banks([_moe_block()])
    assert bank.outputs_per_expert == FFN + FFN + WIDTH  # gate, up, down: each its last dimension
    # 32 samples of 10 tokens on (1, 2): 320 tokens and 2 local experts a device, dense
    dense = dense_activation_bytes([bank], 32, (1, 2))
    assert dense == 320 * (EXPERTS // 2) * (2 * FFN + WIDTH) * 4
    # dispatched: 160 tokens a device, 100 slots an expert at 1.25, every expert's on each device
    slots = capacity_per_expert(160, 2, EXPERTS, 1.25)
    dispatched = dispatched_activation_bytes([bank], 32, (1, 2), [2], 1.25)
    assert dispatched == slots * EXPERTS * (2 * FFN + WIDTH) * 4
    assert dense > dispatched
    assert dense / dispatched == pytest.approx(EXPERTS / (1.25 * 2))  # experts ÷ (capacity × k)


def test_the_experts_activations_follow_the_config():
    def counted(experts: int, batch: int = 32, mesh: tuple[int, int] = (1, 2)):
        banks = find_banks([_moe_block(experts)])
        return (
            dense_activation_bytes(banks, batch, mesh),
            dispatched_activation_bytes(banks, batch, mesh, [2], 1.0),
        )

    (dense_4, dispatched_4), (dense_8, dispatched_8) = counted(4), counted(8)
    assert dense_8 == 2 * dense_4  # every expert on every token: twice the experts, twice
    assert dispatched_8 == dispatched_4  # top-k of them a token, whatever the experts
    assert counted(4, batch=64) == (2 * dense_4, 2 * dispatched_4)
    # the batch over a data axis of 2: half the tokens a device, for both
    assert counted(4, mesh=(2, 1)) == (dense_4, dispatched_4)
    # an expert axis that does not divide the experts leaves the bank whole on each device
    assert dense_activation_bytes(find_banks([_moe_block(6)]), 32, (1, 4)) == 320 * 6 * 40 * 4


def test_capacity_rounds_up_and_never_exceeds_the_tokens():
    assert capacity_per_expert(64, 2, 4, 1.25) == 40
    assert capacity_per_expert(10, 2, 4, 1.0) == 5
    assert capacity_per_expert(10, 2, 4, 100.0) == 10
