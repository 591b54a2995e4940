"""A comparison measures until each step is known: more interleaved rounds of the configurations
whose interval is still wide, within their budget, and each row says what ended its measuring."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runner import run_grid
from gpu_parallel_kit.runs.results.run_result import RunResult
from gpu_parallel_kit.runs.scheduling.measuring_until_known import (
    BUDGET,
    FAILED,
    FIXED,
    KNOWN,
    LIMIT,
    Measuring,
    MeasuringRule,
    ended_by,
    measuring_rule,
    needs_s,
    row_fields,
)
from tests.builders import instant_result, small_experiment, small_mlp


def _row(steps, status="ok"):
    steps = tuple(steps)
    return RunResult(
        run_id="r",
        experiment_id="e",
        strategy="single",
        devices=1,
        virtual=False,
        status=status,
        global_batch=64,
        step_times_s=steps,
        step_time_s=float(np.median(steps)) if steps else None,
    )


STEADY = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98]
NOISY = [1.0, 2.5, 0.6, 1.9, 0.7, 2.2]


def test_a_steady_step_is_known_at_once_and_a_noisy_one_wants_more_rounds():
    rule = MeasuringRule(budget_s=10.0)
    assert ended_by(rule, Measuring([_row(STEADY)] * 2, [0.1, 0.1])) == KNOWN
    noisy = Measuring([_row(NOISY), _row([x * 1.5 for x in NOISY])], [0.1, 0.1])
    assert ended_by(rule, noisy) is None
    assert needs_s(rule, noisy) > 0


def test_the_budget_the_round_limit_a_failure_and_fixed_rounds_end_it():
    noisy = [_row(NOISY), _row([x * 1.5 for x in NOISY])]
    assert ended_by(MeasuringRule(budget_s=0.25), Measuring(noisy, [0.1, 0.1])) == BUDGET
    assert ended_by(MeasuringRule(max_rounds=2), Measuring(noisy, [0.1, 0.1])) == LIMIT
    assert ended_by(MeasuringRule(adaptive=False), Measuring(noisy, [0.1, 0.1])) == FIXED
    failed = [*noisy, _row((), status="crashed")]
    assert ended_by(MeasuringRule(), Measuring(failed, [0.1] * 3)) == FAILED
    fields = row_fields(MeasuringRule(budget_s=0.25), Measuring(noisy, [0.1, 0.1]))
    assert fields["measured_until"] == BUDGET and fields["measure_needs_s"] > 0


def test_the_next_round_is_priced_from_the_later_rounds():
    # The first round's 5 s set-up says nothing of what a resident round costs.
    measuring = Measuring([_row(NOISY)] * 3, [5.0, 0.2, 0.4])
    assert measuring.round_s() == pytest.approx(0.3)


def test_fixed_rounds_and_bad_budgets(monkeypatch):
    monkeypatch.delenv("GPK_ROUNDS", raising=False)
    monkeypatch.delenv("GPK_MEASURE_S", raising=False)
    assert measuring_rule(False, None).adaptive
    assert not measuring_rule(True, None).adaptive
    assert measuring_rule(False, 2.5).budget_s == 2.5
    monkeypatch.setenv("GPK_ROUNDS", "1")
    assert not measuring_rule(False, None).adaptive
    with pytest.raises(GpkError, match="measure_s=-1"):
        measuring_rule(False, -1)
    monkeypatch.setenv("GPK_MEASURE_S", "soon")
    with pytest.raises(GpkError, match="GPK_MEASURE_S='soon'"):
        measuring_rule(False, None)


def _specs():
    exp = small_experiment(small_mlp)
    return [exp.plan("single", 1), exp.plan("data", 2)]


def _grid(rule, noisy_rounds):
    """A grid whose `data` configuration is noisy for its first `noisy_rounds` rounds."""
    executed = []

    def execute(spec, ahead, upcoming, round_of):
        executed.append((spec.strategy, round_of))
        turn = sum(1 for s, _ in executed if s == spec.strategy) - 1
        steps = NOISY if spec.strategy == "data" and turn < noisy_rounds else STEADY
        scale = 1.0 + 0.5 * (turn % 2) if steps is NOISY else 1.0
        return instant_result(spec, step_times_s=tuple(x * scale for x in steps))

    done = run_grid(_specs(), 3, execute, None, rule)
    return done, executed


def test_only_the_configurations_not_yet_known_run_more_rounds_interleaved():
    done, executed = _grid(MeasuringRule(budget_s=100.0), noisy_rounds=4)
    single, data = done
    assert len(single) == 3  # known after its planned rounds
    assert len(data) > 3  # wanted more, until known or the round limit
    assert [s for s, _ in executed[:6]] == ["single", "data"] * 3  # planned rounds interleaved
    assert all(s == "data" for s, _ in executed[6:])
    assert [r[0] for s, r in executed if s == "data"] == list(range(len(data)))
    assert single[0].extra["measured_until"] == KNOWN
    assert data[-1].extra["measured_until"] in (KNOWN, LIMIT)


def test_fixed_rounds_run_as_asked_and_say_so():
    done, _ = _grid(MeasuringRule(adaptive=False), noisy_rounds=3)
    assert [len(rows) for rows in done] == [3, 3]
    assert done[1][0].extra["measured_until"] == FIXED
    assert "measure_needs_s" in done[1][0].extra


def test_a_spent_budget_ends_the_rounds():
    done, _ = _grid(MeasuringRule(budget_s=0.0), noisy_rounds=12)
    assert [len(rows) for rows in done] == [3, 3]
    assert done[1][0].extra["measured_until"] == BUDGET


def test_rows_keep_their_fields_through_the_merge():
    from gpu_parallel_kit.runs.scheduling.comparison_rounds import merge_rounds, tag_round

    done, _ = _grid(MeasuringRule(budget_s=0.0), noisy_rounds=12)
    rows = [tag_round(r, (i, 3, "x")) for i, r in enumerate(done[1])]
    merged = merge_rounds(rows)
    assert merged.extra["measured_until"] == BUDGET
    assert dataclasses.asdict(merged)["extra"]["measure_s"] >= 0
