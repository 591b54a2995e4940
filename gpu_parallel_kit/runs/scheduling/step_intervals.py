"""95 % intervals for a step time and for a speedup, from steps measured in rounds.

A two-level bootstrap (Davison & Hinkley, "Bootstrap Methods and their Application", 1997, §3.8):
draw the rounds with replacement, then each drawn round's steps, and take the median of the
rounds' medians. A speedup draws the same round indices for the run and its baseline, so drift
that hit both cancels. Draws are seeded. An interval whose high end is more than twice its low
end is `too_wide`: the views then write "too few steps to tell". Why: `docs/results.md`, "Rounds
and intervals".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

DRAWS = 2000
LEVEL = 0.95
WIDEST = 2.0  # high / low beyond which an interval is too wide to be read as one
_SEED = 20240601


class Interval(NamedTuple):
    """A 95 % interval: its low and high ends."""

    low: float
    high: float


def round_medians(rounds: Sequence[Sequence[float]], rng: np.random.Generator) -> np.ndarray:
    """(rounds, DRAWS) medians of each round's steps drawn again with replacement."""
    draws = []
    for steps in rounds:
        values = np.asarray(steps, dtype="float64")
        picks = rng.integers(0, len(values), size=(DRAWS, len(values)))
        draws.append(np.median(values[picks], axis=1))
    return np.stack(draws)


def _combined(medians: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """The median over the drawn rounds of each draw: `chosen` is (DRAWS, rounds) indices."""
    columns = np.arange(DRAWS)[:, None]
    return np.median(medians[chosen, columns], axis=1)


def _bounds(values: np.ndarray) -> Interval:
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return Interval(float(low), float(high))


def _usable(rounds: Sequence[Sequence[float]]) -> list[Sequence[float]]:
    return [steps for steps in rounds if len(steps) > 0]


def step_time_interval(rounds: Sequence[Sequence[float]]) -> Interval | None:
    """The 95 % interval of the median of the rounds' median steps; None without steps.

    >>> low, high = step_time_interval([[1.0, 1.1, 0.9], [1.2, 1.0, 1.1]])
    >>> 0.9 <= low <= high <= 1.2
    True
    """
    rounds = _usable(rounds)
    if not rounds:
        return None
    rng = np.random.default_rng(_SEED)
    medians = round_medians(rounds, rng)
    chosen = rng.integers(0, len(rounds), size=(DRAWS, len(rounds)))
    return _bounds(_combined(medians, chosen))


def speedup_interval(
    baseline_rounds: Sequence[Sequence[float]],
    baseline_batch: int,
    rounds: Sequence[Sequence[float]],
    batch: int,
) -> Interval | None:
    """The 95 % interval of a speedup in samples per second: (batch / step) over the baseline's
    (baseline_batch / its step). Rounds are paired when both runs have as many; else drawn
    apart. None when either side has no steps."""
    baseline_rounds, rounds = _usable(baseline_rounds), _usable(rounds)
    if not baseline_rounds or not rounds or batch <= 0 or baseline_batch <= 0:
        return None
    rng = np.random.default_rng(_SEED)
    base_medians = round_medians(baseline_rounds, rng)
    medians = round_medians(rounds, rng)
    chosen = rng.integers(0, len(rounds), size=(DRAWS, len(rounds)))
    if len(baseline_rounds) == len(rounds):
        base_chosen = chosen  # paired: round r of both ran back to back
    else:
        base_chosen = rng.integers(0, len(baseline_rounds), size=(DRAWS, len(baseline_rounds)))
    step = _combined(medians, chosen)
    base_step = _combined(base_medians, base_chosen)
    ratio = (batch / step) / (baseline_batch / base_step)
    return _bounds(ratio)


def includes_one(low: float | None, high: float | None) -> bool:
    """Whether a ratio's interval cannot tell it from 1 (no gain, no loss)."""
    return low is not None and high is not None and low <= 1.0 <= high


def too_wide(low: object, high: object) -> bool:
    """Whether an interval is too wide to tell anything: its high end more than `WIDEST` times
    its low end, or its low end not above 0. False when either end is unknown.

    >>> too_wide(0.251, 6.85), too_wide(1.48, 1.75)
    (True, False)
    """
    try:
        low, high = float(low), float(high)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # None, pd.NA: no interval
        return False
    if math.isnan(low) or math.isnan(high):
        return False
    return low <= 0 or high > WIDEST * low
