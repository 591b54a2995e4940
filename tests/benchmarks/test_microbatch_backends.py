"""benchmarks/microbatch_backends.py's figures from literal rounds: each backend's ratio gpipe ÷
naive paired within a round, JAX's over TensorFlow's, and the verdict against the target."""

from __future__ import annotations

import importlib
import pathlib

import pytest

BENCHMARKS = pathlib.Path(__file__).parents[2] / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("microbatch_backends")


def _round(tf_naive, tf_gpipe, jax_naive, jax_gpipe):
    def pair(naive, gpipe):
        return {"naive": {"simulated_step_s": naive}, "gpipe": {"simulated_step_s": gpipe}}

    return {"tensorflow": pair(tf_naive, tf_gpipe), "jax": pair(jax_naive, jax_gpipe)}


def test_ratios_are_paired_within_each_round(bench):
    rounds = [_round(0.2, 0.1, 0.4, 0.3), _round(0.4, 0.1, 0.2, 0.1), _round(0.3, None, 0.5, 0.5)]
    assert bench.round_ratios(rounds, "tensorflow") == pytest.approx([0.5, 0.25])
    assert bench.round_ratios(rounds, "jax") == pytest.approx([0.75, 0.5, 1.0])
    # The third round has no TensorFlow pair, so it gives no quotient.
    assert bench.round_quotients(rounds) == pytest.approx([1.5, 2.0])


def test_the_verdict_says_when_a_round_crosses_the_target(bench):
    spread = bench.Spread.of([0.9, 1.0, 1.2])
    assert (spread.median, spread.low, spread.high, spread.rounds) == (1.0, 0.9, 1.2, 3)
    assert bench.verdict(spread) == "met, within the rounds' noise"
    assert bench.verdict(bench.Spread.of([1.2, 1.3])) == "MISSED"
    assert bench.verdict(bench.Spread.of([0.8])) == "met"
    assert bench.Spread.of([]) is None


def test_the_summary_sets_jax_against_tensorflow(bench):
    lines = bench.summary_lines([_round(0.2, 0.1, 0.4, 0.3)], ["tensorflow", "jax"])
    assert "0.500" in lines[1] and "0.750" in lines[2]
    assert "1.500" in lines[3] and "MISSED" in lines[3]
    assert len(bench.summary_lines([_round(0.2, 0.1, 0.4, 0.3)], ["jax"])) == 2


def test_rounds_turn_the_order_round(bench):
    first, second = (
        bench.run_order(["tensorflow", "jax"], 0),
        bench.run_order(["tensorflow", "jax"], 1),
    )
    assert first == [
        ("tensorflow", "naive"),
        ("tensorflow", "gpipe"),
        ("jax", "naive"),
        ("jax", "gpipe"),
    ]
    assert second == [
        ("jax", "gpipe"),
        ("jax", "naive"),
        ("tensorflow", "gpipe"),
        ("tensorflow", "naive"),
    ]
