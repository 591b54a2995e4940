"""A comparison's intervals in its table: step time and speedup from rounds, and the flag on a
speedup beyond what the devices could give.

The intervals come from `runs/scheduling/step_intervals.py` (a two-level bootstrap over steps and
rounds, rounds paired with the baseline's); the table only places them beside the figures they
bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd

from ...runs.results.run_result import RunResult
from ...runs.scheduling.step_intervals import speedup_interval

# A comparison measured in rounds (runs/scheduling/comparison_rounds.py): how many, the 95 %
# interval of the step time over steps and rounds, and that of the speedup with rounds paired
# (runs/scheduling/step_intervals.py); blank for a row of one run. `above_ideal`: a speedup beyond
# the device count on devices that share cores or memory (virtual devices, a CPU), which is a
# measurement's artefact, not a gain. `measured_until`: what ended the configuration's rounds
# (runs/scheduling/measuring_until_known.py), and `measure_needs_s` about how many more seconds
# of rounds would have told a step still too wide.
INTERVAL_COLUMNS: tuple[str, ...] = (
    "rounds",
    "measured_until",
    "measure_needs_s",
    "step_time_ci_low_s",
    "step_time_ci_high_s",
    "speedup_ci_low",
    "speedup_ci_high",
    "above_ideal",
)


def interval_cells(result: RunResult) -> dict[str, object]:
    """The row's own interval cells; the speedup's need the baseline (`with_speedup_intervals`)."""
    low, high = result.step_time_ci_low_s, result.step_time_ci_high_s
    return {
        "rounds": result.extra.get("rounds", pd.NA),
        "measured_until": result.extra.get("measured_until", ""),
        "measure_needs_s": float(result.extra.get("measure_needs_s") or math.nan),
        "step_time_ci_low_s": math.nan if low is None else float(low),
        "step_time_ci_high_s": math.nan if high is None else float(high),
        "speedup_ci_low": math.nan,
        "speedup_ci_high": math.nan,
        "above_ideal": False,
    }


def with_speedup_intervals(
    frame: pd.DataFrame,
    results: Sequence[RunResult],
    groups: list[str],
    baseline_of: Callable[[pd.DataFrame], pd.Series | None],
) -> pd.DataFrame:
    """Each speedup's 95 % interval, rounds paired with the baseline's
    (runs/scheduling/step_intervals.py), where both rows merged rounds; and the flag on a speedup
    beyond the device count where devices share cores or memory."""
    frame = frame.astype(
        {
            **dict.fromkeys(INTERVAL_COLUMNS[3:7], "float64"),
            "measure_needs_s": "float64",
            "rounds": "Int64",
            "above_ideal": "bool",
        }
    )
    for _, group in frame.groupby(groups, sort=False, dropna=False):
        baseline = baseline_of(group)
        if baseline is None:
            continue
        base = results[baseline.name]
        base_rounds = base.extra.get("round_step_times_s")
        for index in group.index[group["status"] == "ok"]:
            row_rounds = results[index].extra.get("round_step_times_s")
            if index == baseline.name or not base_rounds or not row_rounds:
                continue
            interval = speedup_interval(
                base_rounds, base.global_batch, row_rounds, results[index].global_batch
            )
            if interval is not None:
                frame.loc[index, ["speedup_ci_low", "speedup_ci_high"]] = [
                    interval.low,
                    interval.high,
                ]
    shared = frame["virtual"].astype(bool) | (frame["device_kind"] == "cpu")
    beyond = frame["efficiency"] > 1.0  # shown above 100 %: flagged, whatever its interval
    frame["above_ideal"] = (beyond & shared & ~frame["projected"].astype(bool)).astype(bool)
    return frame
