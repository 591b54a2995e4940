"""How long a comparison measures: more rounds until each step time is known, or its budget spent.

A comparison runs its planned rounds, interleaved; then, as `timeit.autorange` or
pytest-benchmark go on until a figure is stable, it runs another interleaved round of every
configuration whose step time's 95 % interval (`step_intervals.step_time_interval`) is still wider
than `width` (high ÷ low), for as long as that configuration's measuring budget allows one more
round. The training each round does is the user's (`steps_per_epoch`, `epochs`); only the
number of rounds grows. A caller who fixes `rounds=` fixes the measuring too. Each merged row
says what ended its measuring (`measured_until`) and, where the budget did, about how many more
seconds would have told (`measure_needs_s`). Why: `docs/results.md`, "Measured until known".
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import statistics
from collections.abc import Sequence

from ...errors import GpkError
from ..processes.configuration_lines import RoundsSoFar
from ..results.run_result import RunResult
from .step_intervals import step_time_interval

WIDTH = 1.25  # high ÷ low of a step's 95 % interval at which it counts as known
BUDGET_S = 6.0  # seconds of measuring a configuration may take, its planned rounds included
MAX_ROUNDS = 12  # rounds a configuration runs at most, whatever its budget

KNOWN = "known"  # the interval is within `width`
BUDGET = "budget"  # the budget would not hold another round
FIXED = "rounds fixed"  # the caller fixed the rounds
LIMIT = "round limit"  # MAX_ROUNDS ran
FAILED = "a round failed"  # no more rounds after a failed one
SAID = {BUDGET: "budget spent"}  # how a progress line says what ended the measuring


@dataclasses.dataclass(frozen=True)
class MeasuringRule:
    """When a comparison's configuration has measured enough.

    Args:
        width: high ÷ low of the step time's 95 % interval at which the step counts as known.
        budget_s: seconds a configuration's rounds may take in all (the first round's set-up
            left out), planned rounds included; another round runs only if it fits.
        max_rounds: rounds a configuration runs at most.
        adaptive: False when the caller fixed the rounds: none are added.
    """

    width: float = WIDTH
    budget_s: float = BUDGET_S
    max_rounds: int = MAX_ROUNDS
    adaptive: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.budget_s, bool) or not isinstance(self.budget_s, int | float):
            raise GpkError(f"measure_s={self.budget_s!r} is not a number of seconds; use e.g. 6")
        if not self.budget_s >= 0:
            raise GpkError(
                f"measure_s={self.budget_s!r} is negative; use 0 to keep the planned rounds, "
                "or a few seconds (the default is 6)"
            )
        if not self.width > 1:
            raise ValueError(f"width={self.width!r} must be above 1")

    def most_rounds(self, planned: int) -> int:
        """The rounds a configuration's process may be asked to train: what it keeps waiting for."""
        return max(planned, self.max_rounds) if self.adaptive else planned


def measuring_rule(fixed: bool, measure_s: float | None) -> MeasuringRule:
    """The rule of a comparison: adaptive unless its rounds are `fixed` (by the caller, or by
    training to a target) or GPK_ROUNDS fixes them; `measure_s` or GPK_MEASURE_S the budget."""
    fixed = fixed or bool(os.environ.get("GPK_ROUNDS", "").strip())
    if measure_s is None:
        setting = os.environ.get("GPK_MEASURE_S", "").strip()
        try:
            measure_s = float(setting) if setting else BUDGET_S
        except ValueError:
            raise GpkError(
                f"GPK_MEASURE_S={setting!r} is not a number of seconds; set it to e.g. 6"
            ) from None
    return MeasuringRule(budget_s=measure_s, adaptive=not fixed)


@dataclasses.dataclass(frozen=True)
class Measuring:
    """A configuration's measuring so far: its rows, and the seconds each round took."""

    rows: Sequence[RunResult]
    seconds: Sequence[float]  # each round's, in the caller's clock (the first: its training)

    @functools.cached_property
    def width(self) -> float | None:
        """high ÷ low of the step's 95 % interval over the finished rounds; None without one."""
        steps = [r.step_times_s for r in self.rows if r.ok and r.step_times_s]
        interval = step_time_interval(steps) if steps else None
        if interval is None or interval.low <= 0:
            return None
        return interval.high / interval.low

    def round_s(self) -> float:
        """What another round would take: the median of the later rounds (resident, already
        set up), else the first's."""
        later = list(self.seconds[1:]) or list(self.seconds)
        return statistics.median(later) if later else 0.0


def next_round_wanted(rule: MeasuringRule, measuring: Measuring) -> bool:
    """Whether to run another round of this configuration."""
    return ended_by(rule, measuring) is None


def ended_by(rule: MeasuringRule, measuring: Measuring) -> str | None:
    """What ends this configuration's measuring now (`KNOWN`, `BUDGET`, ...); None: not ended."""
    if any(not r.ok for r in measuring.rows) or not measuring.rows:
        return FAILED
    width = measuring.width
    if width is not None and width <= rule.width:
        return KNOWN
    if not rule.adaptive:
        return FIXED
    if len(measuring.rows) >= rule.max_rounds:
        return LIMIT
    if sum(measuring.seconds) + measuring.round_s() > rule.budget_s:
        return BUDGET
    return None


def needs_s(rule: MeasuringRule, measuring: Measuring) -> float | None:
    """About how many more seconds of rounds would bring the interval within `width`: an
    interval's log-width shrinks as one over the square root of the rounds."""
    width = measuring.width
    rounds = len(measuring.rows)
    if width is None or width <= rule.width or rounds == 0:
        return None
    wanted = math.ceil(rounds * (math.log(width) / math.log(rule.width)) ** 2)
    return max(wanted - rounds, 1) * measuring.round_s()


def row_fields(rule: MeasuringRule, measuring: Measuring) -> dict[str, object]:
    """What a merged row says of its measuring: what ended it, and, where the interval is still
    wide, about how long it would take to tell."""
    fields: dict[str, object] = {
        "measured_until": ended_by(rule, measuring) or BUDGET,
        "measure_s": round(sum(measuring.seconds), 3),
    }
    needed = needs_s(rule, measuring)
    if needed is not None and fields["measured_until"] != KNOWN:
        fields["measure_needs_s"] = round(needed, 1)
    return fields


def rounds_so_far(
    rule: MeasuringRule, measuring: Measuring, configuration: str, planned: int
) -> RoundsSoFar:
    """What a configuration's finished rounds measured, for its progress line: the median of
    their median steps (as its merged row will say it), the interval, and what ended the
    measuring once its `planned` rounds have run."""
    finished = [r for r in measuring.rows if r.ok and r.step_times_s and r.step_time_s]
    step = statistics.median(r.step_time_s for r in finished) if finished else None
    interval = step_time_interval([r.step_times_s for r in finished]) if finished else None
    ended = ended_by(rule, measuring) if len(measuring.rows) >= planned else None
    return RoundsSoFar(
        configuration=configuration,
        rounds=len(measuring.rows),
        step_s=step,
        low_s=interval.low if interval is not None else None,
        high_s=interval.high if interval is not None else None,
        ended=SAID.get(ended, ended) if ended else "",
    )
