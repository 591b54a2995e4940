"""A calibration's arithmetic on literal points: interpolation, fits, checks, JSON."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from gpu_parallel_kit.analysis.cost_model.device_calibration import (
    BusyDevices,
    CollectivePoint,
    DeviceCalibration,
    ElementwisePoint,
    MatmulPoint,
    ModelStep,
    from_probes,
    newest,
)
from gpu_parallel_kit.errors import GpkError

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def busy(g: int, rate: float = 1e11) -> BusyDevices:
    """Products at `rate` FLOP/s above 128³ and half of it at 64³; elementwise 2 µs + bytes at
    10 GB/s; all-reduce 10 µs + bytes at 1 GB/s."""
    return BusyDevices(
        devices=g,
        matmuls=(
            MatmulPoint(64, 64, 64, 2 * 64**3 / (rate / 2)),
            MatmulPoint(128, 128, 128, 2 * 128**3 / rate),
            MatmulPoint(256, 256, 256, 2 * 256**3 / rate),
        ),
        elementwise=tuple(ElementwisePoint(n, 2e-6 + 8 * n / 1e10) for n in (256, 4096, 65536)),
        call_s=5e-6 * g,
        collectives=tuple(CollectivePoint("all_reduce", n, 1e-5 + n / 1e9) for n in (1024, 1 << 20))
        if g > 1
        else (),
    )


def calibration(**changes) -> DeviceCalibration:
    fields = dict(
        backend="jax",
        device_kind="cpu",
        description="x86_64",
        device_names=("/cpu:0", "/cpu:1"),
        versions={"jax": "0"},
        created_at=NOW.isoformat(timespec="seconds"),
        probe_s=30.0,
        busy=(busy(1), busy(2, rate=5e10)),
        model_steps=(ModelStep("k", "mlp", 1, (64, 256), (0.001, 0.003)),),
    )
    fields.update(changes)
    return DeviceCalibration(**fields)


def test_matmul_time_follows_the_measured_rate_and_holds_it_outside():
    cal = calibration()
    assert cal.matmul_rate(2 * 128**3, 1) == pytest.approx(1e11)
    between = cal.matmul_rate(2 * 90**3, 1)  # log-log between 64³ (5e10) and 128³ (1e11)
    assert 5e10 < between < 1e11
    assert cal.matmul_rate(2 * 1024**3, 1) == pytest.approx(1e11)  # the largest size's rate
    assert cal.matmul_rate(2 * 16**3, 1) == pytest.approx(5e10)  # the smallest size's rate
    assert cal.matmul_rate(2 * 128**3, 2) == pytest.approx(5e10)  # two busy: its own points


def test_elementwise_fit_recovers_launch_and_bandwidth():
    fixed, bandwidth = calibration().elementwise_fit(1)
    assert fixed == pytest.approx(2e-6, rel=1e-6)
    assert bandwidth == pytest.approx(1e10, rel=1e-6)


def test_collective_is_linear_between_sizes_and_carried_on_beyond():
    cal = calibration()
    assert cal.collective_s("all_reduce", 1024, 2) == pytest.approx(1e-5 + 1024 / 1e9)
    middle = (1024 + (1 << 20)) / 2
    assert cal.collective_s("all_reduce", middle, 2) == pytest.approx(1e-5 + middle / 1e9)
    assert cal.collective_s("all_reduce", 1 << 24, 2) == pytest.approx(1e-5 + (1 << 24) / 1e9)
    assert cal.collective_s("all_reduce", 1 << 20, 1) == 0.0  # one device sends nothing
    with pytest.raises(GpkError, match="all-gather"):
        cal.collective_s("all_gather", 1024, 2)


def test_model_step_is_linear_in_the_batch_and_none_when_not_timed():
    cal = calibration()
    assert cal.model_step_s("k", 128, 1) == pytest.approx(0.001 + 0.002 * 64 / 192)
    assert cal.model_step_s("k", 512, 1) == pytest.approx(0.003 + 0.002 * 256 / 192)
    assert cal.model_step_s("other", 128, 1) is None
    assert cal.model_step_s("k", 128, 2) is None


def test_busy_devices_not_measured_is_one_sentence():
    with pytest.raises(GpkError, match=r"not 4; calibrate again with gpk.calibrate\(devices=4\)"):
        calibration().at(4)


@pytest.mark.parametrize(
    ("backend", "kind", "devices", "says"),
    [
        ("tensorflow", "cpu", 2, "measured on jax, and this run is on tensorflow"),
        ("jax", "gpu", 2, "measured cpu devices, and this run uses gpu devices"),
        ("jax", "cpu", 8, r"measured 2 device\(s\), and this run uses 8"),
    ],
)
def test_a_calibration_of_other_devices_is_refused(backend, kind, devices, says):
    with pytest.raises(GpkError, match=says):
        calibration().check_for(backend, kind, devices)


def test_an_out_of_date_calibration_is_refused():
    old = calibration(created_at=(datetime.now(UTC) - timedelta(days=200)).isoformat())
    with pytest.raises(GpkError, match="days old"):
        old.check_for("jax", "cpu", 2)


def test_json_round_trip_and_newest(tmp_path):
    cal = calibration(created_at=datetime.now(UTC).isoformat(timespec="seconds"))
    path = cal.save(tmp_path / "calibrations")  # a folder, made where missing
    assert path.parent.name == "calibrations" and path.name.startswith("jax-cpu-2-")
    tmp_path = path.parent
    loaded = DeviceCalibration.load(path)
    assert loaded == cal and loaded.path == str(path)
    assert newest(tmp_path, "jax", "cpu", 2) == cal
    assert newest(tmp_path, "jax", "cpu", 4) is None  # too few devices
    assert newest(tmp_path, "tensorflow", "cpu", 1) is None
    (tmp_path / "jax-cpu-2-broken.json").write_text("{")
    assert newest(tmp_path, "jax", "cpu", 2) == cal  # a broken file is passed over


def test_another_format_or_a_broken_file_is_one_sentence(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"format": 0}')
    with pytest.raises(GpkError, match="format 0, not 1; calibrate again"):
        DeviceCalibration.load(path)
    path.write_text("not json")
    with pytest.raises(GpkError, match="is not JSON"):
        DeviceCalibration.load(path)
    with pytest.raises(GpkError, match="cannot be read"):
        DeviceCalibration.load(tmp_path / "missing.json")


def probe_answer(g: int) -> dict:
    """What a probe child answers for `g` busy devices: one point of each kind."""
    return {
        "devices": g,
        "device_names": [f"/cpu:{i}" for i in range(g)],
        "device_kind": "cpu",
        "description": "x86_64",
        "matmuls": [{"m": 64, "k": 64, "n": 64, "seconds": 1e-5}],
        "elementwise": [{"elements": 256, "seconds": 1e-6}],
        "call_s": 1e-5,
        "collectives": [],
        "versions": {"jax": "0"},
    }


def test_from_probes_orders_counts_and_takes_the_widest_names():
    answers = [probe_answer(g) for g in (4, 1, 2)]
    cal = from_probes("jax", answers, 12.0, now=NOW)
    assert [b.devices for b in cal.busy] == [1, 2, 4]
    assert cal.devices == 4 and cal.created_at.startswith("2026-12-06")
    table = cal.table()
    assert set(table["measured"]) == {"matmul", "elementwise", "call"}
    assert math.isclose(
        table.loc[table.measured == "matmul", "rate_per_s"].iloc[0], 2 * 64**3 / 1e-5
    )


def test_the_summary_gives_each_busy_counts_rates_from_its_points():
    rows = calibration().summary()
    assert list(rows.index) == [1, 2]
    assert rows.loc[1, "matmul (GFLOP/s)"] == pytest.approx(100.0)  # 1e11 FLOP/s
    assert rows.loc[2, "matmul (GFLOP/s)"] == pytest.approx(50.0)
    assert rows.loc[1, "elementwise (GB/s)"] == pytest.approx(10.0, rel=1e-3)
    assert rows.loc[2, "one call (µs)"] == pytest.approx(10.0)
    assert math.isnan(rows.loc[1, "all-reduce (GB/s)"])  # nothing to reduce on one device
    assert rows.loc[2, "all-reduce (GB/s)"] == pytest.approx(
        (1 << 20) / (1e-5 + 2**20 / 1e9) / 1e9, rel=1e-3
    )


def test_a_calibration_is_a_software_stack_measured_on_its_devices():
    cal = calibration()
    stack = cal.as_stack()
    assert stack.calibrated and stack.source == cal.label and stack.runs == 0
    # two busy: products at 2.5e10 FLOP/s at 64³ and 5e10 above; the fastest is the peak
    assert stack.step_fixed_s == pytest.approx(1e-5)
    small, large = (stack.matmul.share(3 / n) for n in (64, 256))
    assert small < large <= 1.0
    assert small == pytest.approx(0.5, rel=0.2)
    from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster

    cluster = GPUCluster(device=cal, nodes=1, per_node=2)
    assert cluster.stack == stack and cluster.label.endswith("under calibrated")
    assert GPUCluster(device=cal, per_node=2, stack="nemo-24.12").stack.name == "nemo-24.12"


def timed_model(**figures) -> DeviceCalibration:
    """Two busy devices; the model's step 2 ms at 128 samples each, with `figures` set."""
    return calibration(
        model_steps=(ModelStep("k", "mlp", 2, (64, 128), (0.001, 0.002), **figures),)
    )


def test_arrival_share_is_the_in_step_reduce_beyond_the_probe_over_the_step():
    nbytes = 1 << 20
    probe = calibration().collective_s("all_reduce", nbytes, 2)
    cal = timed_model(reduce_s=probe + 0.0004, reduce_bytes=nbytes, reduce_batch=128)
    assert cal.arrival_share("k", 2) == pytest.approx(0.0004 / 0.002)  # 0.4 ms of a 2 ms step
    faster = timed_model(reduce_s=probe / 2, reduce_bytes=nbytes, reduce_batch=128)
    assert faster.arrival_share("k", 2) == 0  # never below the probe's own time
    assert timed_model().arrival_share("k", 2) == 0  # not timed
    assert cal.arrival_share("other", 2) == 0


def test_the_fit_loop_charges_its_step_and_a_share_of_the_dearer_call():
    cal = timed_model(loop_step_s=0.0003, loop_call_s=0.0008, dispatch_s=0.0002)
    assert cal.fit_step_s("k", 2, 8) == pytest.approx(0.0003 + 0.0008 / 8)
    dear = timed_model(loop_step_s=0.0003, loop_call_s=0.0001, dispatch_s=0.0016)
    assert dear.fit_step_s("k", 2, 8) == pytest.approx(0.0003 + 0.0016 / 8)
    assert timed_model().fit_step_s("k", 2, 8) is None


def test_a_tasks_host_cost_is_its_own_timing_else_a_call_of_the_step():
    assert timed_model(task_s=0.0005, dispatch_s=0.0002).task_call_s("k", 2) == 0.0005
    assert timed_model(dispatch_s=0.0002).task_call_s("k", 2) == 0.0002
    assert timed_model().task_call_s("k", 2) == calibration().call_s(2)


def test_a_tasks_host_cost_is_the_pipeline_runners_where_that_costs_more():
    timed = timed_model(task_s=0.0002, dispatch_s=0.0001)
    runner = timed.with_pipeline_tasks({2: 0.0005})
    assert runner.at(2).pipeline_task_s == 0.0005 and runner.at(1).pipeline_task_s == 0
    assert runner.task_call_s("k", 2) == 0.0005  # the runner's own cost, beyond the model's
    assert timed.with_pipeline_tasks({2: 0.0001}).task_call_s("k", 2) == 0.0002
    assert runner.task_call_s("other", 2) == 0.0005  # no step of that model: the runner's
    shown = runner.table()
    assert list(shown[shown.measured == "pipeline task"].seconds) == [0.0005]


def test_the_new_figures_survive_the_json_round_trip(tmp_path):
    cal = timed_model(task_s=0.0005, reduce_s=0.001, reduce_bytes=10, loop_step_s=0.0003)
    cal = cal.with_pipeline_tasks({2: 0.0004})
    loaded = DeviceCalibration.load(cal.save(tmp_path / "c.json"))
    assert loaded.model_steps == cal.model_steps and loaded.busy == cal.busy


def test_a_step_below_the_batches_timed_shrinks_with_its_batch_and_stays_positive():
    cal = timed_model()  # 1 ms at 64 samples, 2 ms at 128
    steep = calibration(model_steps=(ModelStep("k", "mlp", 1, (64, 256), (0.001, 0.016)),))
    assert cal.model_step_s("k", 32, 2) == pytest.approx(0.0005)
    assert steep.model_step_s("k", 32, 1) == pytest.approx(0.0005)  # the line would give < 0


def test_the_pipeline_of_no_work_runs_as_often_as_the_budget_allows():
    from gpu_parallel_kit.planning.calibration_probe import DEFAULT_BUDGET_S, no_work_runs

    assert no_work_runs(DEFAULT_BUDGET_S) == 3  # their median, at the default budget
    assert no_work_runs(DEFAULT_BUDGET_S / 4) == 1  # a short probe: one run
    assert no_work_runs(10 * DEFAULT_BUDGET_S) == 3


def test_the_pipeline_runner_is_timed_on_two_devices_and_charged_to_every_count(monkeypatch):
    from gpu_parallel_kit.planning import calibration_probe

    asked = []
    answer = lambda entry, backend, plan, probe: probe_answer(probe.devices)  # noqa: E731
    monkeypatch.setattr(calibration_probe, "_in_child", answer)
    cal = calibration_probe.calibrate(
        4,
        "jax",
        pipeline_task=lambda g, runs: asked.append((g, runs)) or 0.0003,
        save=False,
        progress=False,
    )
    assert asked == [(2, calibration_probe.NO_WORK_RUNS)]
    assert [b.pipeline_task_s for b in cal.busy] == [0.0, 0.0003, 0.0003]
