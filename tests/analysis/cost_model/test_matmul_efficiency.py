"""The matmul efficiency: its share falls as a matmul's sides shrink, its fit recovers a known
line, and a plan's step is timed at its own shapes' band."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_parallel_kit.analysis.cost_model import matmul_efficiency as me
from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster
from gpu_parallel_kit.analysis.cost_model.model_card import ModelCard
from gpu_parallel_kit.analysis.cost_model.parallel_plan import Plan
from gpu_parallel_kit.analysis.cost_model.parallel_plan_step_time import step_time
from gpu_parallel_kit.analysis.cost_model.roofline import Efficiency
from gpu_parallel_kit.errors import GpkError

S, H, A, L, V = 2048, 4096, 32, 32, 51200
CARD = ModelCard(
    parameters=L * (12 * H * H + 13 * H) + (V + S) * H,
    layers=L,
    hidden=H,
    heads=A,
    sequence=S,
    flops_per_sample=72 * S * L * H * H * (1 + S / (6 * H) + V / (16 * L * H)),
    activation_bytes=S * H * 34 + 5 * A * S * S,
)


def plan(**fields):
    base = dict(data=1, tensor=1, stages=1, sharding="none", micro_batch_size=1,
                micro_batches=1, schedule="-", virtual_stages=1, checkpointing="none")  # fmt: skip
    return Plan(**{**base, **fields})


def test_a_matmul_reaches_less_of_peak_as_any_side_shrinks():
    fit = me.MatmulEfficiency(peak_share=0.7, edge=200)
    big = me.Matmul(8192, 8192, 8192, 1.0).inverse_size
    assert fit.share(0.0) == 0.7
    for small in (me.Matmul(8192, 8192, 128, 1.0), me.Matmul(128, 8192, 8192, 1.0)):
        assert fit.share(small.inverse_size) < fit.share(big) < 0.7
    # one side of `edge` elements, the others unbounded: half of the peak share
    assert fit.share(1 / 200) == pytest.approx(0.35)


def test_a_blocks_matmuls_count_megatrons_forward_flops_on_one_device():
    for tensor, micro in ((1, 1), (8, 2)):
        *block, head = me.transformer_matmuls(H, A, S, V, tensor, micro, layers=L)
        assert sum(m.flops for m in block) == pytest.approx(
            micro * (24 * S * H * H + 4 * S * S * H) / tensor
        )
        assert head.flops == pytest.approx(micro * 2 * S * H * V / tensor / L)  # its share
        found = block
        # the split shrinks the columns of the QKV matmul and the depth of the projection
        assert found[0].columns == 3 * H // tensor and found[1].depth == H // tensor


def test_the_fit_recovers_the_line_it_was_drawn_from_and_its_band_the_residuals():
    truth = me.MatmulEfficiency(peak_share=0.68, edge=230)
    shapes = [0.6e-3, 0.9e-3, 1.4e-3, 2.3e-3]
    points = [me.Measured(f"run {i}", x, truth.share(x)) for i, x in enumerate(shapes)]
    found = me.fit(points)
    assert (found.peak_share, found.edge) == pytest.approx((0.68, 230), rel=1e-9)
    assert (found.low, found.high) == pytest.approx((1.0, 1.0))
    # one point 10 % faster, one 10 % slower than the line: the band is their ratios
    skewed = [dataclasses.replace(points[1], share=points[1].share * 1.1),
              dataclasses.replace(points[2], share=points[2].share * 0.9)]  # fmt: skip
    wide = me.fit([points[0], *skewed, points[3]])
    assert wide.low < 0.95 and wide.high > 1.05


def test_a_fit_needs_two_shapes():
    with pytest.raises(GpkError, match="two points of different shapes"):
        me.fit([me.Measured("a", 1e-3, 0.5), me.Measured("b", 1e-3, 0.6)])


def test_larger_matmuls_on_each_device_give_a_higher_share():
    def likely(**fields):
        return me.FITTED.for_plan(CARD, plan(**fields)).likely

    assert likely(tensor=8) < likely(tensor=2) < likely(tensor=1)
    assert likely(micro_batch_size=1) < likely(micro_batch_size=4)
    band = me.FITTED.for_plan(CARD, plan())
    assert band.low < band.likely < band.high


def test_a_step_is_timed_at_its_plans_own_band_unless_a_band_is_given():
    cluster = GPUCluster("a100", nodes=1, per_node=8)
    used = plan(data=8, micro_batches=4)
    fitted = step_time(CARD, used, cluster)  # under the cluster's stack
    band = cluster.stack.matmul.for_plan(CARD, used)
    assert step_time(CARD, used, cluster, band).likely == fitted.likely
    fixed = Efficiency(0.3, 0.45, 0.6)
    assert fixed.for_plan(CARD, used) is fixed
    assert step_time(CARD, used, cluster, fixed).likely != fitted.likely


def test_a_bad_efficiency_is_refused_in_one_sentence():
    with pytest.raises(GpkError, match="peak_share"):
        me.MatmulEfficiency(peak_share=1.5, edge=200)
    with pytest.raises(GpkError, match="bracket 1"):
        me.MatmulEfficiency(peak_share=0.7, edge=200, low=1.1)


def test_a_mixtures_matmuls_are_its_experts_over_their_share_of_the_tokens():
    # Qwen3-30B-A3B's shape: 128 experts of a gated 768-wide MLP, top 8, 48 blocks
    h, f, experts, k, s, layers, vocabulary = 2048, 768, 128, 8, 4096, 48, 151936
    weights = layers * experts * 3 * h * f
    card = ModelCard(
        parameters=weights + layers * 4 * h * h + vocabulary * h, layers=layers, hidden=h,
        heads=32, sequence=s, flops_per_sample=1e14, activation_bytes=1e9,
        vocabulary=vocabulary, experts=experts, top_k=k, expert_parameters=weights,
    )  # fmt: skip
    gate_up, down = me.expert_matmuls(h, f, experts, k, s, 1, 16)
    assert (gate_up.rows, gate_up.columns, gate_up.depth) == (4096, 2 * f, h)  # 16·s·8/128
    assert (down.columns, down.depth) == (h, f) and gate_up.flops == 2 * down.flops
    # more tokens an expert under a wider expert axis: larger matmuls
    assert me.card_inverse_size(card, 1, 1, 16) < me.card_inverse_size(card, 1, 1)
    # read as a GPT, its 30 B parameters made a head of millions of tokens: far smaller H
    as_gpt = dataclasses.replace(card, experts=0, top_k=0, expert_parameters=0.0)
    assert me.card_inverse_size(card, 1, 1, 16) > 2 * me.card_inverse_size(as_gpt, 1, 1)
