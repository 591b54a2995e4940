"""A comparison's later rounds trained in the process of its first
(runs/scheduling/resident_rounds.py): which runs may stay, the same work as a fresh run's in every
round, and a round that starts afresh when the process it waited for has gone."""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import pytest

from gpu_parallel_kit.runs.processes.progress_bars import startup_from, startup_text
from gpu_parallel_kit.runs.scheduling.resident_rounds import (
    prepared_together,
    round_spec,
    stays_resident,
)
from tests.builders import small_experiment, small_mlp


class _Training:
    """A configuration's progress that keeps the event each of its runs' training began with
    (each round's event names its run)."""

    def __init__(self, run_id: str, seen: dict) -> None:
        self.run_id, self.seen = run_id, seen

    def __call__(self, event: dict) -> None:
        if event.get("event") == "round":
            self.run_id = event["run_id"]
        if event.get("event") == "phase" and event["phase"] == "training":
            self.seen[self.run_id] = event

    def close(self, result) -> None:
        pass


def _gated(spec):
    return dataclasses.replace(spec, gate="/tmp/gpk-gate-test")


def test_only_gated_fit_runs_of_several_rounds_stay(fake_machine, monkeypatch):
    monkeypatch.delenv("GPK_RESIDENT", raising=False)
    exp = small_experiment(small_mlp)
    data = _gated(exp.plan("data", 2))
    assert stays_resident(data, 3)
    assert stays_resident(_gated(exp.plan("single", 1)), 2)
    assert not stays_resident(data, 1)  # one round: nothing to keep the process for
    assert not stays_resident(exp.plan("data", 2), 3)  # no gate: GPUs, or a run alone
    assert not stays_resident(dataclasses.replace(data, mode="explicit"), 3)
    assert not stays_resident(dataclasses.replace(data, save_weights="w.npz"), 3)
    assert stays_resident(_gated(small_experiment(small_mlp, backend="jax").plan("data", 2)), 3)
    monkeypatch.setenv("GPK_RESIDENT", "0")
    assert not stays_resident(data, 3)


def test_a_round_spec_names_its_configuration_and_the_rounds_its_process_trains(
    fake_machine, monkeypatch
):
    monkeypatch.delenv("GPK_RESIDENT", raising=False)
    spec = _gated(small_experiment(small_mlp).plan("data", 2))
    first = round_spec(spec, 0, 3, spec.run_id)
    later = round_spec(spec, 2, 3, "other")
    assert first.resident == (spec.run_id, 0, 3) and first.rounds_here == 3
    assert later.resident == (spec.run_id, 2, 3) and later.run_id == "other"
    assert later.rounds_here == 1 and not later.more_rounds_here  # started afresh: its round only
    alone = round_spec(dataclasses.replace(spec, gate=None), 1, 3, "x")
    assert alone.resident is None and alone.rounds_here == 1


def test_first_rounds_of_two_configurations_or_more_prepare_together(fake_machine, monkeypatch):
    monkeypatch.delenv("GPK_RESIDENT", raising=False)
    exp = small_experiment(small_mlp)
    first = [round_spec(_gated(exp.plan(s, n)), 0, 3, "r") for s, n in (("single", 1), ("data", 2))]
    together = prepared_together(first)
    assert [s.prepares_together for s in together] == [True, True]
    assert [s.resident for s in together] == [s.resident for s in first]
    assert prepared_together(first[:1]) == []  # nothing to prepare beside
    # One round: not resident, and prepared together all the same.
    alone = [round_spec(_gated(exp.plan("data", n)), 0, 1, "r") for n in (1, 2)]
    assert [s.resident for s in alone] == [None, None]
    assert [s.prepares_together for s in prepared_together(alone)] == [True, True]
    jax = small_experiment(small_mlp, backend="jax")
    on_jax = [round_spec(_gated(jax.plan("data", n)), 0, 3, "r") for n in (1, 2)]
    assert len(prepared_together(on_jax)) == 2  # the wait is at a step's beginning, in line
    # A run that may not wait for the caller's word is started in its turn.
    ungated = round_spec(exp.plan("data", 2), 0, 1, "r")
    explicit = dataclasses.replace(alone[1], mode="explicit")
    assert prepared_together([alone[0], ungated, explicit]) == []
    monkeypatch.setenv("GPK_RESIDENT", "0")  # memory before start-ups: one process at a time
    assert prepared_together(first) == []


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_later_rounds_train_in_the_first_rounds_process_from_its_first_state(tmp_path, backend):
    from gpu_parallel_kit.store import RunLog

    log = str(tmp_path / "runs.sqlite")
    training = {}  # run id: the event its training began with
    exp = small_experiment(
        small_mlp,
        deterministic=True,
        measure_comm=False,
        log=log,
        backend=backend,
        progress=lambda spec: _Training(spec.run_id, training),
    )
    exp.compare(["single", "data"], [2], rounds=3)
    rows = RunLog(log).results()
    assert [(r.strategy, r.devices, r.status) for r in rows] == [
        ("single", 1, "ok"),
        ("data", 2, "ok"),
    ] * 3
    assert len({r.run_id for r in rows}) == 6  # every round is a run of its own in the log
    for first, *later in (rows[0::2], rows[1::2]):
        assert "trained_in_process_of" not in first.extra
        # The first rounds set up and traced side by side, before any timed step.
        assert first.extra["prepared_beside_other_runs"]
        for row in later:
            assert row.extra["trained_in_process_of"] == first.run_id
            assert row.extra["configuration"] == first.run_id
            # The weights, the optimizer's state and the batches were put back: the same curve.
            assert row.history["loss"] == first.history["loss"]
            assert row.step_times_s and len(row.step_times_s) == len(first.step_times_s)
            # While it trains, its progress says where, not a start-up of 0.0 s it never had.
            took = startup_text(*startup_from(training[row.run_id], time.perf_counter()))
            assert took == " · in an earlier round's process"
        assert "earlier round" not in startup_text(*startup_from(training[first.run_id], 0.0))


@pytest.mark.slow
def test_a_round_whose_process_has_gone_starts_afresh(monkeypatch):
    from gpu_parallel_kit.runner import run_grid, run_isolated, with_gate

    monkeypatch.delenv("GPK_RESIDENT", raising=False)
    exp = small_experiment(small_mlp, measure_comm=False)
    spec = with_gate(exp.plan("data", 2))
    killed = []

    def execute(spec, ahead, upcoming, round_of):
        if round_of[0] == 1:  # the process waiting for this round is killed first
            for process, _ in ahead._parked.values():
                os.kill(process.pid, signal.SIGKILL)
                killed.append(process.pid)
        return run_isolated(spec, None, None, ahead=ahead, then=upcoming)

    (rows,) = run_grid([spec], 3, execute, None)
    assert killed and [r.status for r in rows] == ["ok", "ok", "ok"]
    assert "trained_in_process_of" not in rows[1].extra  # round 2 in a fresh process
    assert rows[2].extra["trained_in_process_of"] == rows[1].run_id  # which trains round 3


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_a_one_round_comparison_prepares_together_and_trains_as_one_device(tmp_path, backend):
    from gpu_parallel_kit.store import RunLog

    log = str(tmp_path / "runs.sqlite")
    exp = small_experiment(small_mlp, deterministic=True, log=log, backend=backend)
    exp.compare(["single", "data"], [2], rounds=1)
    single, data = RunLog(log).results()
    for row in (single, data):
        assert row.ok, row.reason
        assert row.extra["prepared_beside_other_runs"]
        assert len(row.step_times_s) == row.steps_per_epoch * row.epochs - row.warmup_steps
    # Traced or compiled before the first timed step, timed after training: the figures are in.
    assert data.extra["standalone_all_reduce_s"] > 0 and data.extra["comm_noise_s"] >= 0
    assert (data.comm_time_s is None) == data.extra.get("comm_below_noise", False)
    # Preparing beside another run changed nothing the data-parallel run computes.
    assert data.history["loss"] == pytest.approx(single.history["loss"], abs=1e-5)
