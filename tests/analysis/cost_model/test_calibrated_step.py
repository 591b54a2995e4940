"""Each strategy's predicted step composed from a literal calibration, part by part."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.calibrated_step import (
    ADAM_UPDATE_BYTES,
    far_off_part,
    predict,
)
from gpu_parallel_kit.analysis.tables.comparison_table import comparison_table
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.results.run_result import RunResult

from .test_device_calibration import busy, calibration

PARAMS = 400_000


def cal4():
    steps = tuple(
        __import__(
            "gpu_parallel_kit.analysis.cost_model.device_calibration", fromlist=["ModelStep"]
        ).ModelStep("k", "mlp", g, (64, 128, 256), (0.001 * g, 0.002 * g, 0.004 * g))
        for g in (1, 2, 4)
    )
    return calibration(
        device_names=tuple(f"/cpu:{i}" for i in range(4)),
        busy=(busy(1), busy(2), busy(4)),
        model_steps=steps,
    )


def run(strategy, devices, step=0.004, **extra) -> RunResult:
    return RunResult(
        run_id=f"{strategy}-{devices}",
        experiment_id="e",
        strategy=strategy,
        devices=devices,
        virtual=devices > 1,
        status="ok",
        global_batch=256,
        step_time_s=step,
        throughput_samples_s=256 / step,
        backend="jax",
        device_kind="cpu",
        extra={"parameter_bytes": PARAMS, "tuned": {"steps_per_execution": 8}, **extra},
    )


def update(cal, g, share=1.0):
    return cal.elementwise_s(ADAM_UPDATE_BYTES * PARAMS * share, g)


def test_single_is_the_timed_step_with_the_update_and_a_share_of_a_call():
    cal = cal4()
    p = predict(run("single", 1), cal, "k", None)
    assert p.compute_s == pytest.approx(0.004 + update(cal, 1))
    assert p.fixed_s == pytest.approx(cal.call_s(1) / 8)
    assert p.step_s == pytest.approx(p.compute_s + p.fixed_s)
    assert p.communication_s == 0 and p.compute_source == "the model's step, timed"


def test_data_adds_the_gradient_all_reduce_over_its_devices():
    cal = cal4()
    p = predict(run("data", 4, gradient_bytes=PARAMS), cal, "k", None)
    assert p.compute_s == pytest.approx(0.004 + update(cal, 4))  # 64 samples, 4 busy
    assert p.communication_s == pytest.approx(cal.collective_s("all_reduce", PARAMS, 4))
    assert p.fixed_s == pytest.approx(cal.call_s(4) / 8)


def test_tensor_adds_each_activation_all_reduce_on_the_model_axis():
    cal = cal4()
    collectives = [{"elements_per_sample": 64}, {"elements_per_sample": 32}]
    p = predict(run("tensor", 2, collectives=collectives), cal, "k", None)
    expected = sum(cal.collective_s("all_reduce", e * 256 * 4, 2) for e in (64, 32))
    assert p.communication_s == pytest.approx(expected)


def test_pipeline_replays_its_schedule_and_has_a_bubble():
    cal = cal4()
    stages = [
        {"stage": 0, "layers": ["a"], "parameter_bytes": PARAMS / 2},
        {"stage": 1, "layers": ["b"], "parameter_bytes": PARAMS / 2},
    ]
    r = run("pipeline", 2, stages=stages, cut_bytes=[2 * 256 * 128], schedule="gpipe")
    r = RunResult(**{**r.__dict__, "schedule": "gpipe", "micro_batches": 4})
    p = predict(r, cal, "k", None)
    assert p.bubble_s > 0  # two stages, four micro-batches: (K-1)/(M+K-1) of the step idle
    assert p.step_s == pytest.approx(p.compute_s + p.communication_s + p.bubble_s + p.fixed_s)


def test_a_strategy_without_a_predictor_and_another_backend_are_sentences():
    cal = cal4()
    with pytest.raises(GpkError, match="this run is on tensorflow"):
        predict(RunResult(**{**run("single", 1).__dict__, "backend": "tensorflow"}), cal, "k", None)
    with pytest.raises(GpkError, match="neither a timed model step nor a counted step"):
        predict(run("single", 1), cal, "other-model", None)


def test_far_off_names_the_part_furthest_from_its_measurement():
    cal = cal4()
    measured = run("data", 4, step=0.02, gradient_bytes=PARAMS)
    measured = RunResult(**{**measured.__dict__, "comm_time_s": 0.015})
    p = predict(measured, cal, "k", None)
    assert far_off_part(p, measured).startswith("communication under by")
    close = RunResult(**{**measured.__dict__, "step_time_s": p.step_s})
    assert far_off_part(p, close) == ""


def test_the_table_carries_the_prediction_and_its_ratio():
    cal = cal4()
    r = run("single", 1, step=0.005)
    p = predict(r, cal, "k", None)
    r = RunResult(**{**r.__dict__, "extra": {**r.extra, "predicted": p.to_extra()}})
    row = comparison_table([r]).iloc[0]
    assert row["predicted_step_time_s"] == pytest.approx(p.step_s)
    assert row["predicted_over_measured"] == pytest.approx(p.step_s / 0.005)
    assert "calibrated on 4 cpu (jax)" in row["predicted_from"]
