"""When two measured figures differ by less than their own spread: "the same within noise".

Every step time is a median with its interquartile range (`step_time_spread_s`): half the steps
fall within about ± half that range of the median. Two runs whose interquartile ranges overlap
cannot be told apart by these measurements, so a speedup smaller than the two half-ranges
together is not a gain the measurement can show.
"""

from __future__ import annotations

import math
from typing import Any

from .cell_text import parse_number


def relative_spread(row: Any) -> float:
    """Half the interquartile range of the step times over their median (the "±" of the
    median); 0 when either is unknown."""
    step, spread = parse_number(row.get("step_time_s")), parse_number(row.get("step_time_spread_s"))
    if math.isnan(step) or math.isnan(spread) or step <= 0:
        return 0.0
    return abs(spread) / 2 / step


def within_noise(a: Any, b: Any) -> bool:
    """True when the throughputs of rows `a` and `b` differ by no more than their spreads.

    >>> within_noise({"throughput_samples_s": 100, "step_time_s": 1.0, "step_time_spread_s": 0.2},
    ...              {"throughput_samples_s": 105, "step_time_s": 0.95, "step_time_spread_s": 0.0})
    True
    """
    ta, tb = (
        parse_number(a.get("throughput_samples_s")),
        parse_number(b.get("throughput_samples_s")),
    )
    if math.isnan(ta) or math.isnan(tb) or max(ta, tb) <= 0:
        return False
    return abs(ta - tb) / max(ta, tb) <= relative_spread(a) + relative_spread(b)
