"""The cost model against closed forms, literal numbers and one published result (GPipe)."""

from __future__ import annotations

import math

import pytest

from gpu_parallel_kit.analysis.cost_model.hardware_presets import (
    DEVICES,
    INTERCONNECTS,
    Interconnect,
    compute_scale,
    device,
    interconnect,
)
from gpu_parallel_kit.analysis.cost_model.step_time_model import (
    Partition,
    Workload,
    data_parallel,
    data_pipeline,
    pipeline,
    pipeline_bound_s,
    ring_all_reduce_s,
    single_device,
)
from gpu_parallel_kit.errors import GpkError

FREE = Interconnect("free", math.inf, 0.0)  # infinite bandwidth, no latency
LINK = Interconnect("test", 100e9, 1e-6)  # 100 GB/s, 1 µs
# 1 ms forward and 2 ms backward per sample, 400 MB of gradients.
WORK = Workload(forward_s=1e-3, backward_s=2e-3, parameter_bytes=4e8)


# --- the building blocks -------------------------------------------------------------------------


def test_workload_splits_a_measured_step_with_backward_twice_the_forward():
    w = Workload.from_step_time(0.3, 100, 4e8)
    assert (w.forward_s, w.backward_s) == pytest.approx((1e-3, 2e-3))
    assert Workload.from_step_time(0.4, 100, 0, backward_ratio=3).forward_s == pytest.approx(1e-3)
    faster = w.scaled(4)
    assert (faster.forward_s, faster.backward_s, faster.parameter_bytes) == pytest.approx(
        (2.5e-4, 5e-4, 4e8)
    )


def test_ring_all_reduce_literal_and_one_device():
    # alpha 2(N-1) + 2(N-1)/N S/B = 1e-6 * 6 + 1.5 * 1e9 / 1e11
    assert ring_all_reduce_s(1e9, 4, LINK) == pytest.approx(0.015006)
    assert ring_all_reduce_s(1e9, 1, LINK) == 0.0
    assert ring_all_reduce_s(1e9, 8, FREE) == 0.0


def test_a_point_to_point_send_pays_latency_only_when_something_is_sent():
    assert LINK.send_s(1e6) == pytest.approx(1e-6 + 1e-5)
    assert LINK.send_s(0) == 0.0


# --- data parallel -------------------------------------------------------------------------------


def test_one_device_has_no_communication():
    single = single_device(WORK, 64)
    one = data_parallel(WORK, 1, LINK, global_batch=64)
    assert single.step_time_s == one.step_time_s == pytest.approx(0.192)
    assert one.comm_time_s == one.comm_bytes == one.exposed_comm_s == 0.0
    assert one.speedup == pytest.approx(1.0)
    assert single.throughput_samples_s == pytest.approx(64 / 0.192)


@pytest.mark.parametrize("devices", [2, 4, 8, 64])
def test_infinite_bandwidth_gives_the_ideal_speedup(devices):
    p = data_parallel(WORK, devices, FREE, global_batch=64)
    assert p.speedup == pytest.approx(devices)
    assert p.efficiency == pytest.approx(1.0)
    assert p.comm_time_s == 0.0


def test_data_parallel_literal_without_and_with_overlap():
    link = Interconnect("plain", 100e9, 0.0)
    # G/N = 16 samples: forward 16 ms, backward 32 ms; all-reduce 1.5 * 4e8 / 1e11 = 6 ms.
    plain = data_parallel(WORK, 4, link, global_batch=64)
    assert plain.step_time_s == pytest.approx(0.054)
    assert plain.comm_time_s == pytest.approx(0.006)
    assert plain.exposed_comm_s == pytest.approx(0.006)
    assert plain.comm_bytes == pytest.approx(2 * 3 * 4e8)
    assert plain.speedup == pytest.approx(0.192 / 0.054)
    assert repr(plain) == (
        "<Prediction data×4: step 0.054 s, comm 0.006 s (0.006 s exposed), speedup 3.56, "
        "efficiency 0.889>"
    )
    hidden = data_parallel(WORK, 4, link, global_batch=64, overlap=True)
    assert hidden.step_time_s == pytest.approx(0.048)  # 16 + max(32, 6) ms: fully hidden
    assert hidden.exposed_comm_s == pytest.approx(0.0)
    assert hidden.speedup == pytest.approx(4.0)
    big = Workload(1e-3, 2e-3, 4e9)  # all-reduce 60 ms > backward 32 ms
    assert data_parallel(big, 4, link, global_batch=64, overlap=True).step_time_s == (
        pytest.approx(0.016 + 0.060)
    )


# --- pipelines -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("stages", "micro_batches"), [(1, 1), (2, 1), (2, 4), (4, 8), (8, 32)])
def test_equal_stages_without_transfers_match_the_closed_form(stages, micro_batches):
    part = Partition.equal(stages)
    p = pipeline(WORK, part, FREE, global_batch=64, micro_batches=micro_batches)
    slot = (1e-3 + 2e-3) * 64 / micro_batches / stages
    assert p.step_time_s == pytest.approx(pipeline_bound_s(slot, stages, micro_batches))
    assert p.bubble_fraction == pytest.approx((stages - 1) / (micro_batches + stages - 1))
    assert p.speedup == pytest.approx(stages * micro_batches / (micro_batches + stages - 1))


def test_naive_runs_the_stages_one_after_another_and_pays_every_transfer():
    link = Interconnect("plain", 1e9, 1e-3)
    part = Partition.equal(4, cut_bytes_per_sample=1e6)
    p = pipeline(WORK, part, link, global_batch=64, schedule="naive")
    # 192 ms of compute; 3 cuts x 2 directions x (1 ms + 64 MB / 1 GB/s).
    assert p.step_time_s == pytest.approx(0.192 + 6 * (1e-3 + 0.064))
    assert p.comm_time_s == pytest.approx(6 * 0.065)
    assert p.comm_bytes == pytest.approx(2 * 3 * 64e6)
    assert p.speedup < 1


def test_many_micro_batches_leave_no_bubble():
    bubbles = [
        pipeline(WORK, Partition.equal(4), FREE, global_batch=1024, micro_batches=m).bubble_fraction
        for m in (1, 4, 16, 64, 256)
    ]
    assert bubbles == sorted(bubbles, reverse=True)
    assert bubbles[0] == pytest.approx(0.75)
    assert bubbles[-1] == pytest.approx(3 / 259)  # (K-1)/(M+K-1) -> 0 as M grows
    assert pipeline_bound_s(1.0 / 10_000, 4, 10_000) == pytest.approx(1.0003)


def test_unbalanced_stages_are_bounded_by_the_slowest():
    shares = (0.1, 0.2, 0.6, 0.1)
    part = Partition(shares, shares, (0.25,) * 4, (0.0,) * 3)
    for m in (1, 8, 64):
        p = pipeline(WORK, part, FREE, global_batch=64, micro_batches=m)
        slowest = 0.6 * 0.192 / m  # the slowest stage's forward and backward of one micro-batch
        assert m * slowest - 1e-12 <= p.step_time_s <= pipeline_bound_s(slowest, 4, m) + 1e-12
        assert p.speedup <= 1 / 0.6 + 1e-9  # never faster than the slowest stage allows
    assert p.step_time_s / (64 * slowest) < 1.05  # with many micro-batches it *is* that stage


def test_the_slowest_forward_and_the_slowest_backward_may_sit_on_different_stages():
    part = Partition((0.7, 0.3), (0.2, 0.8), (0.5, 0.5), (0.0,))
    for m in (1, 4, 32):
        p = pipeline(WORK, part, FREE, global_batch=64, micro_batches=m)
        forward, backward = [0.7 * 0.064 / m, 0.3 * 0.064 / m], [0.2 * 0.128 / m, 0.8 * 0.128 / m]
        busiest = max(f + b for f, b in zip(forward, backward, strict=True))
        assert m * busiest - 1e-12 <= p.step_time_s
        assert p.step_time_s <= pipeline_bound_s(max(forward) + max(backward), 2, m) + 1e-12


def test_overlapped_transfers_add_only_the_fill_and_drain():
    link = Interconnect("plain", 1e9, 0.0)
    part = Partition.equal(4, cut_bytes_per_sample=1e4)  # 80 KB per micro-batch: 80 µs a send
    p = pipeline(WORK, part, link, global_batch=64, micro_batches=8, overlap=True)
    slot = 0.192 / 8 / 4
    assert p.step_time_s == pytest.approx(pipeline_bound_s(slot, 4, 8) + 2 * 3 * 8e-5)
    blocking = pipeline(WORK, part, link, global_batch=64, micro_batches=8)
    assert blocking.step_time_s > p.step_time_s
    # a middle stage receives both ways each micro-batch: its slot grows by two sends
    assert blocking.step_time_s <= pipeline_bound_s(slot + 2 * 8e-5, 4, 8) + 1e-12


def test_one_f_one_b_takes_as_long_as_gpipe():
    part = Partition.equal(4)
    gpipe = pipeline(WORK, part, FREE, global_batch=64, micro_batches=8)
    one_f_one_b = pipeline(WORK, part, FREE, global_batch=64, micro_batches=8, schedule="1f1b")
    assert one_f_one_b.step_time_s == pytest.approx(gpipe.step_time_s)


def test_data_times_pipeline():
    part = Partition.equal(2)
    free = data_pipeline(WORK, part, 4, FREE, global_batch=64, micro_batches=4)
    alone = pipeline(WORK, part, FREE, global_batch=16, micro_batches=4)
    assert free.devices == 8
    assert free.step_time_s == pytest.approx(alone.step_time_s)
    assert free.speedup == pytest.approx(4 * 2 * 4 / 5)
    link = Interconnect("plain", 100e9, 0.0)
    # each stage all-reduces its half of the 400 MB among 4 copies: 1.5 * 2e8 / 1e11 = 3 ms
    slow = data_pipeline(WORK, part, 4, FREE, global_batch=64, micro_batches=4, data_link=link)
    assert slow.step_time_s == pytest.approx(alone.step_time_s + 0.003)
    assert slow.comm_bytes == pytest.approx(2 * 2 * 3 * 2e8)
    assert slow.bubble_fraction > free.bubble_fraction


def test_bad_partitions_say_what_is_wrong():
    with pytest.raises(GpkError, match="sum to 0.9"):
        Partition((0.5, 0.4), (0.5, 0.5), (0.5, 0.5), (0.0,))
    with pytest.raises(GpkError, match="2 stages have 1 cuts, not 0"):
        Partition((0.5, 0.5), (0.5, 0.5), (0.5, 0.5), ())
    with pytest.raises(GpkError, match="compute_scale=0"):
        WORK.scaled(0)


# --- the published GPipe result ------------------------------------------------------------------


def test_gpipe_on_gpus_without_nvlink_reproduces_huang_et_al_table_3():
    """Huang et al. 2019 (GPipe), Table 3: a Transformer on GPUs without NVLink, M = 32,
    normalised throughput 1 / 1.8 / 3.3 for K = 2 / 4 / 8 partitions.

    From the paper: a Transformer, M = 32 micro-batches, K = 2, 4, 8, GPUs whose copies go
    through host memory over PCIe. Assumed here: 24 equal layers of model dimension 2048 and
    feed-forward 8192, 512 tokens a sequence, 128 sequences a step; GPUs at 40 % of a P100's
    9.3 fp32 TFLOP/s; forward FLOPs per token per layer 24 d^2 + 4 s d; backward = 3 x forward
    (GPipe recomputes the forward in the backward pass); fp32 activations of s x d per sequence
    across each cut; copies at half of PCIe Gen3's 12 GB/s (device to host, then host to
    device) with 20 µs each; embedding and softmax left out, so the stages are equal. With
    equal stages the normalised throughput is set by the bubble (M + K - 1) and the copies'
    share, so these guesses move it little (at 10x the compute rate K = 8 still gives 3.2).
    """
    d, layers, tokens = 2048, 24, 512
    forward = layers * tokens * (24 * d * d + 4 * tokens * d) / (0.4 * 9.3e12)
    work = Workload(forward, 3 * forward, parameter_bytes=12 * d * d * layers * 4)
    via_host = Interconnect("pcie3 via host", 6e9, 20e-6)
    throughput = {}
    for k in (2, 4, 8):
        part = Partition.equal(k, cut_bytes_per_sample=tokens * d * 4)
        p = pipeline(work, part, via_host, global_batch=128, micro_batches=32)
        assert p.comm_time_s / p.step_time_s < 0.05  # activations only: little to send
        throughput[k] = p.throughput_samples_s
    normalised = [throughput[k] / throughput[2] for k in (2, 4, 8)]
    assert normalised == pytest.approx([1.0, 1.8, 3.3], rel=0.10)
    # The micro-batches are what make it scale: one batch through the same pipes does not.
    naive = {
        k: pipeline(work, Partition.equal(k, tokens * d * 4), via_host, global_batch=128)
        for k in (2, 8)
    }
    assert naive[8].throughput_samples_s / naive[2].throughput_samples_s < 1.0


# --- presets -------------------------------------------------------------------------------------


def test_interconnect_presets_carry_the_documented_figures():
    assert {name: link.bandwidth_bytes_s / 1e9 for name, link in INTERCONNECTS.items()} == {
        "nvlink4": 400,
        "nvlink3": 230,
        "pcie5": 50,
        "pcie4": 25,
        "pcie3": 12,
        "net100g": 11,
        "net200g": 22,
        "net400g": 45,
    }
    assert all(link.source and link.latency_s > 0 for link in INTERCONNECTS.values())
    assert interconnect("NVLink4") is INTERCONNECTS["nvlink4"]
    assert repr(INTERCONNECTS["pcie4"]) == "<Interconnect pcie4: 25 GB/s, 5 µs>"


def test_a_user_link_from_a_dict():
    link = interconnect({"name": "my-ib", "bandwidth_gb_s": 40, "latency_us": 4})
    assert (link.name, link.bandwidth_bytes_s, link.latency_s) == ("my-ib", 40e9, 4e-6)
    raw = interconnect({"bandwidth_bytes_s": 1e9})
    assert (raw.name, raw.latency_s) == ("custom", 0.0)
    with pytest.raises(GpkError, match="'bandwidth_gb_s' or 'bandwidth_bytes_s'"):
        interconnect({"latency_us": 4})
    with pytest.raises(GpkError, match="give bytes/s above 0"):
        interconnect({"bandwidth_gb_s": 0})
    with pytest.raises(GpkError, match="'nvlink4', 'nvlink3'"):
        interconnect("nvlink5")
    with pytest.raises(TypeError):
        interconnect(40)


def test_device_presets_and_compute_scale():
    assert {n: (d.flops / 1e12, d.memory_bytes / 1e9) for n, d in DEVICES.items()} == {
        "a100": (312, 80),
        "h100": (989, 80),
        "h200": (989, 141),
    }
    assert compute_scale("a100", "h100") == pytest.approx(989 / 312)
    assert compute_scale("h100", "h200") == pytest.approx(1.0)
    assert compute_scale("h100", "h200", bound="memory") == pytest.approx(4.8 / 3.35)
    mine = device({"name": "lab-cpu", "tflops": 2, "memory_gb": 64, "memory_bandwidth_gb_s": 100})
    assert compute_scale(mine, "a100") == pytest.approx(156)
    with pytest.raises(GpkError, match="'compute' or 'memory'"):
        compute_scale("a100", "h100", bound="power")


def test_zero_bubble_fills_the_pipeline_with_weight_gradients():
    """zb-h1 takes the input and weight gradients as half the backward each: with the 1:2
    forward:backward of WORK that is F:B:W = 1:1:1, where the paper's bubble is exact."""
    part = Partition.equal(4)
    one_f_one_b = pipeline(WORK, part, FREE, global_batch=64, micro_batches=8, schedule="1f1b")
    zero_bubble = pipeline(WORK, part, FREE, global_batch=64, micro_batches=8, schedule="zb-h1")
    assert zero_bubble.step_time_s < one_f_one_b.step_time_s
    assert zero_bubble.bubble_fraction == pytest.approx(3 / (3 * 8 + 3))
    assert zero_bubble.comm_bytes == one_f_one_b.comm_bytes  # W sends nothing
