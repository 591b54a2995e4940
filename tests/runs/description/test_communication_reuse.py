"""Communication measured once per configuration: later rounds report the first round's figures,
name the run that measured them, and take their share against their own step."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_parallel_kit.runner import run_grid
from gpu_parallel_kit.runs.description.communication_reuse import measured_in, reusing
from tests.builders import instant_result, small_experiment, small_mlp


def _measured_row(spec, comm_time_s=0.002):
    row = instant_result(spec, comm_time_s=comm_time_s)
    row.extra.update(comm_method="exposed: with minus without", comm_noise_s=0.0005)
    return row


def _specs():
    exp = small_experiment(small_mlp)
    return [exp.plan("data", 1), exp.plan("data", 2)]


def test_later_rounds_carry_the_first_rounds_figures_and_are_started_as_executed():
    executed, started_ahead = [], []

    def execute(spec, ahead, upcoming, round_of):
        executed.append(spec)
        started_ahead.append(upcoming)
        if spec.comm_from is not None:
            return instant_result(spec, comm_time_s=spec.comm_from.as_dict()["comm_time_s"])
        return _measured_row(spec, comm_time_s=0.001 * (len(executed)))

    first, second = _specs()
    done = run_grid([first, second], 3, execute, None)
    assert [s.comm_from for s in executed[:2]] == [None, None]  # round 1 measures
    for spec in executed[2:]:
        measured_by = done[0][0] if spec.devices.count == 1 else done[1][0]
        assert spec.comm_from.run_id == measured_by.run_id
        assert spec.comm_from.as_dict()["comm_time_s"] == measured_by.comm_time_s
        assert spec.comm_from.as_dict()["comm_noise_s"] == 0.0005
    # The spec a run was started ahead with is the one then executed, reuse and all.
    assert started_ahead[:-1] == executed[1:]


def test_nothing_is_reused_without_a_measurement_or_when_measuring_is_off():
    spec = _specs()[1]
    unmeasured = instant_result(spec)  # comm_time_s None
    failed = dataclasses.replace(_measured_row(spec), status="crashed")
    assert measured_in([unmeasured, failed]) is None
    off = dataclasses.replace(spec, measure_comm=False)
    assert reusing(off, [_measured_row(spec)]).comm_from is None
    reused = instant_result(spec, comm_time_s=0.002)
    reused.extra.update(comm_method="x", comm_measured_in="abc")
    assert measured_in([reused]) is None  # only a run that measured itself lends its figures


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_comparisons_later_round_reports_the_measurement_of_its_first(tmp_path, backend):
    from gpu_parallel_kit.store import RunLog

    exp = small_experiment(small_mlp, backend=backend, log=str(tmp_path / "runs.sqlite"))
    exp.compare(["data"], [1, 2], rounds=2)
    rows = RunLog(tmp_path / "runs.sqlite").results()
    assert [(r.devices, r.status) for r in rows] == [(1, "ok"), (2, "ok")] * 2
    first, later = rows[1], rows[3]
    assert "comm_measured_in" not in first.extra and _taken(first) is not None
    assert later.extra["comm_measured_in"] == first.run_id
    assert _taken(later) == _taken(first)
    assert later.extra["comm_noise_s"] == first.extra["comm_noise_s"]
    note = f"measured once for this configuration, in its run {first.run_id}"
    assert later.extra["comm_method"] == f"{first.extra['comm_method']}; {note}"
    share = later.extra.get("comm_share_raw", later.comm_share)
    assert share == pytest.approx(_taken(later) / later.step_time_s)


def _taken(row):
    """The figure as measured, whether or not it was below its noise
    (runs/results/below_noise.py)."""
    return row.extra.get("comm_time_raw_s", row.comm_time_s)
