"""The roofline on counted work: published throughputs within a factor of 2, the launch floor,
calibration reproducing a given throughput. The counts are real ones (XLA's cost analysis of
Keras's train step on JAX, `worker/jax/work_count.py`), stored as JSON beside this file."""

from __future__ import annotations

import json
import pathlib

import pytest

from gpu_parallel_kit.analysis.cost_model import hardware_presets, roofline
from gpu_parallel_kit.analysis.cost_model.counted_work import WorkCount, from_counts
from gpu_parallel_kit.errors import GpkError

DATA = pathlib.Path(__file__).parent.parent / "data"


def counted(name: str) -> WorkCount:
    return from_counts(json.loads((DATA / f"{name}_jax_count.json").read_text()))


def throughput(work, device, precision, batch, which="likely"):
    efficiency = roofline.DEFAULT_EFFICIENCY.at(which)
    step = roofline.step_compute(
        work, hardware_presets.device(device), precision, batch, efficiency
    )
    return batch / step.seconds


# (device, precision, published img/s for one GPU at batch 256, where it was published)
PUBLISHED = [
    # NVIDIA DeepLearningExamples, TensorFlow ResNet-50 v1.5, DGX A100, 1 GPU, AMP + XLA
    ("a100", "bf16", 2375),
    # the same table, TF32 + XLA
    ("a100", "tf32", 909),
    # MLPerf Training v3.0 3.0-2053: 8×H100 in 13.47 min, ≈ 37 epochs of 1.28 M images
    ("h100", "bf16", 6900),
]


def test_resnet50_counted_flops_match_the_published_count():
    work = counted("resnet50")
    # He et al. 2016: 3.8e9 multiply-adds forward at 224×224, 2 FLOPs each (Keras's v1: ~4.1e9)
    assert 7.0e9 < work.forward_flops_per_sample < 8.3e9
    # backward ≈ 2 × forward: the step is about 3 × forward
    assert 2.8 < work.flops_per_sample / work.forward_flops_per_sample < 3.2
    assert work.parameters == 25_583_592


@pytest.mark.parametrize(("device", "precision", "published"), PUBLISHED)
def test_resnet50_single_gpu_throughput_within_a_factor_of_two(device, precision, published):
    projected = throughput(counted("resnet50"), device, precision, 256)
    assert published / 2 < projected < published * 2


def test_the_band_holds_the_likely_value_and_is_ordered():
    work = counted("resnet50")
    low, likely, high = (
        throughput(work, "a100", "bf16", 256, which) for which in ("low", "likely", "high")
    )
    assert low < likely < high
    assert 2375 / 1.5 < likely < 2375 * 1.5


def test_fusion_takes_off_the_elementwise_layers_bytes():
    assert roofline.fusion(counted("mlp")) == 1.0  # Dense only: nothing to fuse
    assert 0.4 < roofline.fusion(counted("resnet50")) < 0.6


def test_the_mlp_is_bound_by_launches_whatever_the_batch_share():
    work = counted("mlp")
    device = hardware_presets.device("h100")
    whole = roofline.step_compute(work, device, "bf16", 512, 0.45)
    eighth = roofline.step_compute(work, device, "bf16", 64, 0.45)
    assert whole.bound == eighth.bound == "launches"
    assert whole.seconds == eighth.seconds == pytest.approx(work.kernels * roofline.LAUNCH_S)


def test_precision_changes_compute_bound_time_by_the_peak_ratio():
    work = counted("resnet50")
    device = hardware_presets.device("a100")
    fp32 = roofline.step_compute(work, device, "fp32", 256, 0.45)
    assert fp32.bound == "compute"
    assert fp32.seconds == pytest.approx(work.flops(256) / 19.5e12 / 0.45)


def test_calibration_reproduces_the_given_throughput_and_others_follow():
    work = counted("resnet50")
    device = hardware_presets.device("a100")
    given = roofline.Calibration(2000.0, "a100", 256, "bf16", "a user's measurement")
    band = roofline.calibrated_band(work, device, given)
    step = roofline.step_compute(work, device, "bf16", 256, band.likely)
    assert 256 / step.seconds == pytest.approx(2000.0)
    # At another batch the same share applies to the model's own work at that batch.
    half = roofline.step_compute(work, device, "bf16", 128, band.likely)
    roof, _ = roofline.roofline_s(work, device, "bf16", 128)
    assert half.seconds == pytest.approx(roof / band.likely)
    assert band.low < band.likely < band.high


def test_calibration_faster_than_the_peak_is_refused():
    work = counted("resnet50")
    with pytest.raises(GpkError, match="peak"):
        roofline.calibrated_band(
            work, hardware_presets.device("a100"), roofline.Calibration(1e5, "a100", 4096)
        )


def test_unknown_precision_and_device_name_the_presets():
    with pytest.raises(GpkError, match="'fp32', 'tf32', 'bf16', 'fp16'"):
        hardware_presets.device("a100").peak_flops("int8")
    with pytest.raises(GpkError, match="'a100', 'h100', 'h200'"):
        hardware_presets.device("b200")


def test_the_link_picks_its_usual_gpu():
    assert hardware_presets.usual_device(hardware_presets.interconnect("nvlink4")).name == "h100"
    assert hardware_presets.usual_device(hardware_presets.interconnect("nvlink3")).name == "a100"
    assert hardware_presets.usual_device(hardware_presets.interconnect("pcie4")).name == "h100"


def test_a_count_without_flops_is_refused():
    with pytest.raises(GpkError, match="cannot be counted"):
        WorkCount("x", 0.0, 0.0, 0.0, 0.0)
