"""Where a step's time goes: compute, exposed communication, idle (pipeline bubble).

Plain arithmetic on table rows, shared by the table's columns, the stacked-bar plot and the advice,
so all three tell the same story.
"""

from __future__ import annotations

import math
from typing import Any

from .cell_text import parse_number


def step_breakdown(row: Any) -> tuple[float, float, float]:
    """(compute, exposed communication, idle) seconds per step; NaN without a step time.

    Communication is the exposed time (negative measurements are noise: counted as 0). Idle is the
    measured bubble share of a pipeline step. Compute is what remains.
    """
    step = parse_number(row.get("step_time_s"))
    if math.isnan(step):
        return math.nan, math.nan, math.nan
    comm = max(parse_number(row.get("comm_time_s")), 0.0) if _has(row, "comm_time_s") else 0.0
    bubble = parse_number(row.get("bubble_fraction")) if _has(row, "bubble_fraction") else 0.0
    idle = min(max(bubble, 0.0) * step, step - comm)
    return max(step - comm - idle, 0.0), comm, max(idle, 0.0)


def effective_bandwidth(row: Any) -> float:
    """Bytes per second of exposed communication; NaN when nothing measurable was exposed."""
    nbytes, seconds = parse_number(row.get("comm_bytes")), parse_number(row.get("comm_time_s"))
    if math.isnan(nbytes) or math.isnan(seconds) or seconds <= 0:
        return math.nan
    return nbytes / seconds


def _has(row: Any, key: str) -> bool:
    return not math.isnan(parse_number(row.get(key)))
