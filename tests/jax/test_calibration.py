"""`gpk.calibrate` on this CPU's host devices, and the prediction each measured row then
carries; bad input refused in one sentence before any probe or run starts.

What the calibration reads off its points is held on literal inputs in
tests/analysis/cost_model/test_device_calibration.py and test_calibrated_step.py; here the
probe runs for real, and only what it measured is asserted: no figure, no timing.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.errors import GpkError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    import os

    cache = tmp_path_factory.mktemp("cache")
    kept = os.environ.get("GPK_CACHE_DIR")
    os.environ["GPK_CACHE_DIR"] = str(cache)
    try:
        calibration = gpk.calibrate(
            devices=2, backend="jax", budget_s=10, model="mlp", batch_size=64, progress=False
        )
        exp = gpk.Experiment(
            "mlp", "tabular", batch_size=64, steps_per_epoch=4, backend="jax", progress=False
        )
        compared = exp.compare(
            ["single", "data"], devices=[1, 2], rounds=1, calibration=calibration
        )
    finally:
        if kept is None:
            os.environ.pop("GPK_CACHE_DIR", None)
        else:
            os.environ["GPK_CACHE_DIR"] = kept
    return calibration, compared, cache


def test_the_calibration_measured_every_busy_count_and_kept_itself(calibrated):
    calibration, _, cache = calibrated
    assert [b.devices for b in calibration.busy] == [1, 2]
    assert calibration.backend == "jax" and calibration.device_kind == "cpu"
    two = calibration.at(2)
    kinds = {p.kind for p in two.collectives}
    assert kinds == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_receive"}
    assert all(p.seconds > 0 for p in (*two.matmuls, *two.elementwise, *two.collectives))
    assert {s.devices for s in calibration.model_steps} == {1, 2}  # the model's step, timed
    # The pipeline runner's own task around no work, timed where a pipeline has two stages.
    assert [b.pipeline_task_s > 0 for b in calibration.busy] == [False, True]
    for step in calibration.model_steps:  # a task's host cost and Keras's loop, every count
        assert step.task_s > 0 and step.dispatch_s > 0 and step.loop_step_s + step.loop_call_s > 0
    two_busy = calibration.model_step(calibration.model_steps[0].key, 2)
    # The gradients' all-reduce inside the step, at the data-parallel share of the batch.
    assert two_busy.reduce_bytes > 0 and two_busy.reduce_batch == 32
    # A data-parallel share, a pipeline's micro-batches of a quarter and an eighth, the whole.
    assert two_busy.batches == (8, 16, 32, 64)
    saved = list((cache / "calibrations").glob("jax-cpu-2-*.json"))
    assert len(saved) == 1 and gpk.DeviceCalibration.load(saved[0]) == calibration


def test_every_measured_row_carries_its_prediction(calibrated):
    _, compared, _ = calibrated
    table = compared.table
    assert len(table) == 3
    for _, row in table.iterrows():
        assert row["predicted_step_time_s"] > 0
        assert math.isclose(
            row["predicted_over_measured"], row["predicted_step_time_s"] / row["step_time_s"]
        )
        assert "calibrated on 2 cpu (jax)" in row["predicted_from"]
    parts = compared.results[-1].extra["predicted"]
    assert parts["communication_s"] > 0  # data on 2 devices: the gradients' all-reduce
    figure = compared.plot_predictions()
    assert figure.axes[0].get_xlabel() == "measured step (ms)"


def test_a_calibration_stands_where_a_preset_does(calibrated):
    calibration, compared, _ = calibrated
    cluster = gpk.GPUCluster(device=calibration, nodes=2, per_node=2, between="net100g")
    assert cluster.device.source == calibration.label
    assert cluster.inside.name == calibration.label
    projected = compared.project(calibration, devices=[1, 2])
    rows = [r for r in projected.results if r.projected]
    assert {(r.strategy, r.devices) for r in rows} >= {("single", 1), ("data", 2)}
    for row in rows:  # named by what it was calibrated on, at the rates measured
        assert calibration.label in row.reason and "efficiency 1" in row.reason


def test_a_calibration_of_other_devices_is_refused_before_anything_runs(calibrated):
    calibration, _, _ = calibrated
    exp = gpk.Experiment("mlp", "tabular", batch_size=64, backend="jax", progress=False)
    with pytest.raises(GpkError, match=r"measured 2 device\(s\), and this run uses 4"):
        exp.compare(["single", "data"], devices=[1, 4], calibration=calibration)
    old = calibration.__class__(
        **{
            **calibration.__dict__,
            "created_at": (datetime.now(UTC) - timedelta(days=200)).isoformat(),
        }
    )
    with pytest.raises(GpkError, match="days old"):
        exp.run("single", 1, calibration=old)
    with pytest.raises(GpkError, match="is not a calibration"):
        exp.run("single", 1, calibration=42)


def test_calibrate_refuses_bad_input_in_one_sentence():
    with pytest.raises(GpkError, match="budget_s=1 is too short"):
        gpk.calibrate(backend="jax", budget_s=1)
    with pytest.raises(GpkError, match="devices=99 is more than"):
        gpk.calibrate(devices=99, backend="jax")
