"""The training gate: a run started ahead never trains while the last run still works.

The gate's own rules are checked on plain processes (no TensorFlow); one comparison checks that
starting runs ahead changes nothing a run trains.
"""

from __future__ import annotations

import multiprocessing
import os
import pathlib
import signal
import threading

import numpy as np
import pytest

from gpu_parallel_kit.runs.scheduling import training_gate

_fork = multiprocessing.get_context("fork")


def _hold_then_finish(path: str, held: object, release: object, marker: str) -> None:
    training_gate.hold(path)
    held.set()
    release.wait(30)
    pathlib.Path(marker).write_text("done")  # the holder's last act before it ends
    os._exit(0)


def _start_holder(tmp_path: pathlib.Path) -> tuple[object, object, str, str]:
    path = str(tmp_path / "gate")
    marker = str(tmp_path / "marker")
    held, release = _fork.Event(), _fork.Event()
    holder = _fork.Process(target=_hold_then_finish, args=(path, held, release, marker))
    holder.start()
    assert held.wait(30)
    return holder, release, path, marker


def _pass_in_thread(path: str) -> threading.Thread:
    waiter = threading.Thread(target=training_gate.pass_through, args=(path,), daemon=True)
    waiter.start()
    return waiter


def test_a_run_passes_only_once_the_holder_has_ended(tmp_path):
    holder, release, path, marker = _start_holder(tmp_path)
    waiter = _pass_in_thread(path)
    waiter.join(0.3)
    assert waiter.is_alive(), "passed the gate while another run held it"
    release.set()
    waiter.join(30)
    assert not waiter.is_alive()
    assert pathlib.Path(marker).exists()  # the holder had finished its work first
    holder.join(30)


def test_a_killed_holder_frees_the_gate(tmp_path):
    holder, _release, path, _marker = _start_holder(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    waiter = _pass_in_thread(path)
    waiter.join(30)
    assert not waiter.is_alive()
    holder.join(30)


def test_no_gate_and_a_gone_caller_never_wait(tmp_path):
    assert training_gate.pass_through(None) == 0.0
    assert training_gate.pass_through(str(tmp_path / "removed-with-its-caller")) == 0.0


def test_gpus_never_overlap_two_runs():
    assert training_gate.overlaps("cpu")
    assert not training_gate.overlaps("gpu")


@pytest.mark.slow
def test_runs_prepared_together_or_started_ahead_train_exactly_as_runs_in_turn(
    tmp_path, monkeypatch
):
    """The same comparison prepared side by side, started ahead (a later round in a fresh
    process) and in turn: the same losses, bit for bit, and the rows say how each started."""
    import keras

    import gpu_parallel_kit as gpk
    from gpu_parallel_kit import api

    def build():
        return keras.Sequential([keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])

    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 8)).astype("float32")
    y = rng.integers(0, 3, size=128)
    exp = gpk.Experiment(
        model=build,
        data=(x, y),
        batch_size=32,
        epochs=1,
        optimizer="sgd",
        loss="sparse_categorical_crossentropy",
        progress=False,
        log=str(tmp_path / "runs.sqlite"),
    )
    together = exp.compare(["single", "data"], [1, 2]).results  # one round (the tests' default)
    monkeypatch.setenv("GPK_RESIDENT", "0")  # a later round starts a process of its own
    logged = len(exp.log.results())
    exp.compare(["single", "data"], [1, 2], rounds=2)
    ahead = exp.log.results()[logged:][3:]  # the second round's rows
    monkeypatch.setattr(api, "with_gate", lambda spec: spec)
    in_turn = exp.compare(["single", "data"], [1, 2]).results
    assert [r.status for r in together + ahead + in_turn] == ["ok"] * 9
    for rows in zip(together, ahead, in_turn, strict=True):
        assert rows[0].history["loss"] == rows[1].history["loss"] == rows[2].history["loss"]
    assert all(r.extra["prepared_beside_other_runs"] for r in together)
    assert [bool(r.extra.get("next_run_started_beside")) for r in ahead] == [True, True, False]
    assert not any(r.extra.get("prepared_beside_other_runs") for r in ahead + in_turn)
    assert not any(r.extra.get("next_run_started_beside") for r in in_turn)
    assert all("waited_at_gate_s" in r.extra for r in together + ahead)
    for measured in (together[-1], ahead[-1]):  # data on 2 devices: its communication measured
        assert measured.extra.get("comm_measured", True)
        assert "standalone_all_reduce_s" in measured.extra


def _passes_later(path: str) -> threading.Event:
    passed = threading.Event()

    def pass_gate() -> None:
        training_gate.pass_through(path)
        passed.set()

    threading.Thread(target=pass_gate, daemon=True).start()
    return passed


@pytest.mark.parametrize("fails", [False, True])
def test_a_step_counted_ahead_keeps_runs_at_the_gate_until_it_is_done(fails):
    from gpu_parallel_kit.runs.scheduling.step_counting import CountAhead

    counting, finish = threading.Event(), threading.Event()

    def count() -> None:
        counting.set()
        finish.wait(10)
        if fails:
            raise RuntimeError("the count failed")

    ahead = CountAhead(count)
    assert counting.wait(10)
    passed = _passes_later(training_gate.gate_path())
    assert not passed.wait(0.3)  # a run's first step waits while the caller counts
    finish.set()
    ahead.wait()
    assert passed.wait(10)  # given back, also when the count failed


def test_no_run_passes_the_gate_while_another_prepares_under_a_share(tmp_path):
    path = str(tmp_path / "gate")
    pathlib.Path(path).touch()
    training_gate.share(path)  # this process prepares; another run wants to time its steps
    try:
        passed = _passes_later(path)
        assert not passed.wait(0.3)
        training_gate.share(path)  # a second share from the same run changes nothing
    finally:
        training_gate.unshare()
    assert passed.wait(10)


def test_a_share_held_past_the_runs_timeout_is_given_back(tmp_path):
    # A run that hangs while it prepares must not hold the others at the gate past their time.
    path = str(tmp_path / "gate")
    pathlib.Path(path).touch()
    training_gate.share(path, limit_s=0.5)
    try:
        passed = _passes_later(path)
        assert not passed.wait(0.1)
        assert passed.wait(10)  # given back by the limit, not by this run
    finally:
        training_gate.unshare()


def test_an_idle_share_is_given_back_and_a_busy_one_kept(tmp_path, monkeypatch):
    # A run that waits for nothing in particular (a sleeping builder, a hung collective) must not
    # hold the runs ready beside it at the gate; a run that computes keeps its share.
    monkeypatch.setattr(training_gate, "IDLE_SHARE_S", 1.0)
    path = str(tmp_path / "gate")
    pathlib.Path(path).touch()
    training_gate.share(path)
    busy = threading.Event()

    def compute() -> None:
        while not busy.is_set():
            sum(range(10_000))

    worker = threading.Thread(target=compute, daemon=True)
    worker.start()
    try:
        passed = _passes_later(path)
        assert not passed.wait(2.5)  # computing: kept, well past the idle limit
        busy.set()
        worker.join()
        assert passed.wait(10)  # idle from here: given back
    finally:
        busy.set()
        training_gate.unshare()
