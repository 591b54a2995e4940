"""Step-time statistics on plain numbers: which steps count, their median and spread."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import NamedTuple


def default_warmup_steps(total_steps: int) -> int:
    """Steps to leave out: the first ones trace, compile and fill caches.

    Two steps when there are plenty, fewer for very short runs, so that at least half the steps
    are always measured.
    """
    return max(0, min(2, total_steps // 2))


def step_durations(batch_ends: Sequence[float], first_begin: float) -> list[float]:
    """Per-step durations from the timestamps at which each step ended.

    Measured end to end, so input pipeline stalls and callback overhead count as part of a step,
    as they do in the user's real training.
    """
    durations = []
    previous = first_begin
    for end in batch_ends:
        durations.append(end - previous)
        previous = end
    return durations


class MedianAndSpread(NamedTuple):
    """Steps' median and interquartile range; both None without steps."""

    median: float | None
    spread: float | None  # how much to trust the median


def median_and_spread(values: Sequence[float]) -> MedianAndSpread:
    """Median and interquartile range; the spread says how much to trust the median."""
    if not values:
        return MedianAndSpread(None, None)
    if len(values) == 1:
        return MedianAndSpread(float(values[0]), 0.0)
    quartiles = statistics.quantiles(values, n=4, method="inclusive")
    return MedianAndSpread(float(statistics.median(values)), float(quartiles[2] - quartiles[0]))


def warmup_steps(asked: int | None, total_steps: int) -> int:
    """The steps the user asked to leave out (None: the default), leaving at least one timed."""
    if asked is None:
        return default_warmup_steps(total_steps)
    return min(asked, max(total_steps - 1, 0))


# Every communication measurement on both backends: blocks (for the exposed figure,
# alternations of without and with the reduction), and steps or calls per block. Each exposed
# call is one step of the model, so more of them would cost a short run more than its training;
# the same counts keep the backends' figures comparable.
COMM_BLOCKS = 3
COMM_STEPS_PER_BLOCK = 2
# A communication measurement traced or compiled before the first timed step: called after
# training, it times the blocks and returns the figures.
Timing = Callable[[], dict[str, float]]


def communication_figures(
    plain: Sequence[float], reduced: Sequence[float], standalone: float
) -> dict[str, float]:
    """The exposed-communication figures of blocks alternated without and with the reduction
    (both backends measure this way): the difference of the medians, and as its noise half the
    range of the per-block differences (how far apart repeated figures fall)."""
    differences = [r - p for r, p in zip(reduced, plain, strict=True)]
    return {
        "comm_time_s": statistics.median(reduced) - statistics.median(plain),
        "comm_noise_s": (max(differences) - min(differences)) / 2,
        "standalone_all_reduce_s": standalone,
        "step_without_all_reduce_s": statistics.median(plain),
        "step_with_all_reduce_s": statistics.median(reduced),
    }
