"""benchmarks/gpu_check.py on a faked one-H100 machine: the runs answered at once, the counting
child replaced by a stored count, so its GPU path runs without a GPU, JAX or TensorFlow."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

from gpu_parallel_kit.runs.description.device_choice import PhysicalDevice
from gpu_parallel_kit.runs.results.run_result import RunResult

ROOT = pathlib.Path(__file__).parents[2]
COUNT = json.loads((ROOT / "tests" / "analysis" / "data" / "mlp_jax_count.json").read_text())
STEP_S = 0.002  # the faked GPU's step of 256 samples


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gpu_row(spec) -> RunResult:
    return RunResult(
        run_id=spec.run_id,
        experiment_id=spec.experiment_id,
        strategy=spec.strategy,
        devices=spec.devices.count,
        virtual=False,
        status="ok",
        device_kind="gpu",
        global_batch=spec.global_batch,
        step_time_s=STEP_S,
        throughput_samples_s=spec.global_batch / STEP_S,
        backend=spec.backend,
        extra={"parameter_bytes": 433_704},
    )


@pytest.fixture
def one_h100(fake_machine, monkeypatch):
    h100 = PhysicalDevice("/physical_device:GPU:0", "gpu", 0, "NVIDIA H100 80GB HBM3", 80 * 2**30)
    fake_machine.physical = (h100,)
    fake_machine.answer(_gpu_row)
    monkeypatch.setattr("gpu_parallel_kit.api.count_in_child", lambda spec, batches: COUNT)
    module = _load()
    monkeypatch.setattr(module, "discover_physical_devices", lambda backend: (h100,))
    monkeypatch.setattr(module, "_has_tensorflow_gpu", lambda: False)
    return module


def test_gpu_check_records_the_efficiency_it_measured_and_how_to_feed_it_back(
    one_h100, tmp_path, capsys
):
    from gpu_parallel_kit.analysis.cost_model import hardware_presets
    from gpu_parallel_kit.analysis.cost_model.counted_work import from_counts

    out = tmp_path / "gpu_check.json"
    assert (
        one_h100.main(["--models", "mlp", "--out", str(out), "--steps", "3", "--no-calibrate"]) == 0
    )
    report = json.loads(out.read_text())
    (found,) = report["efficiency"]
    work = from_counts(COUNT)
    achieved = (work.flops_per_sample * 256 + work.flops_per_step) / STEP_S
    assert found["gpu"] == "h100" and found["precision"] == "tf32"  # from the GPU's name
    assert found["efficiency"] == pytest.approx(
        achieved / hardware_presets.device("h100").peak_flops("tf32")
    )
    assert found["calibrate"]["throughput_samples_s"] == pytest.approx(256 / STEP_S)
    printed = capsys.readouterr().out
    assert "efficiency" in printed and "calibrate=" in printed
    # The one-GPU row names its preset and precision: it calibrates a projection itself.
    (single,) = [r for r in report["rows"] if r["devices"] == 1]
    assert single["extra"]["gpu_preset"] == "h100" and single["extra"]["precision"] == "tf32"


def test_a_calibration_from_gpu_check_reproduces_its_throughput(one_h100, tmp_path):
    from gpu_parallel_kit.analysis.cost_model.counted_work import from_counts
    from gpu_parallel_kit.analysis.cost_model.projected_rows import (
        ProjectionOptions,
        project_results,
    )

    out = tmp_path / "gpu_check.json"
    one_h100.main(["--models", "mlp", "--out", str(out), "--precision", "bf16", "--no-calibrate"])
    (found,) = json.loads(out.read_text())["efficiency"]
    measured = RunResult(
        run_id="cpu-single",
        experiment_id="e1",
        strategy="single",
        devices=1,
        virtual=False,
        status="ok",
        global_batch=256,
        step_time_s=0.01,
        throughput_samples_s=25_600,
        extra={"parameter_bytes": 433_704},
    )
    rows = project_results(
        [measured],
        "nvlink4",
        [1],
        ProjectionOptions(
            device="h100",
            precision="bf16",
            calibrate=found["calibrate"],
            work={"e1": from_counts(COUNT)},
        ),
    )
    assert rows[0].throughput_samples_s == pytest.approx(256 / STEP_S, rel=1e-6)


def test_an_unknown_gpu_is_named_and_no_efficiency_is_recorded(one_h100, tmp_path, capsys):
    other = PhysicalDevice("/physical_device:GPU:0", "gpu", 0, "NVIDIA L4", 24 * 2**30)
    one_h100.discover_physical_devices = lambda backend: (other,)
    out = tmp_path / "gpu_check.json"
    assert one_h100.main(["--models", "mlp", "--out", str(out), "--no-calibrate"]) == 0
    assert json.loads(out.read_text())["efficiency"] == []
    assert "'NVIDIA L4' has no preset" in capsys.readouterr().err
