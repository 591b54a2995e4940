"""The run every speedup of an experiment is measured against: one rule for the table's speedups,
its time-to-target speedups and the cost model's projections.

The baseline is the experiment's first finished `single` run with a throughput; without one, its
first finished run on one device of any strategy; without that, none (speedups are then NaN).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ...strategies import has


@dataclass(frozen=True)
class Candidate:
    """What the rule reads of a run: a table row or a RunResult, reduced to plain values."""

    status: str
    strategy: str
    devices: int
    throughput_samples_s: float | None


def baseline_index(candidates: Iterable[Candidate]) -> int | None:
    """The position of the baseline among `candidates` (in run order), or None.

    >>> baseline_index([Candidate("ok", "data", 2, 9.0), Candidate("ok", "single", 1, 5.0)])
    1
    """
    usable = [
        (position, c)
        for position, c in enumerate(candidates)
        if c.status == "ok"
        and c.throughput_samples_s is not None
        and not math.isnan(c.throughput_samples_s)
        and c.throughput_samples_s > 0
    ]
    for wanted in (lambda c: has(c.strategy, "baseline"), lambda c: c.devices == 1):
        for position, candidate in usable:
            if wanted(candidate):
                return position
    return None
