"""A comparison measured in rounds: the grid run again and again, then one row per configuration.

Runs of one round are interleaved with the other configurations' (A, B, C, A, B, C, …), so a
drift of the machine, a neighbour's load or the clock of a shared CPU, hits every strategy alike
instead of whichever ran at that moment. Each round is its own run (its own process and row in
the run log, tagged with its round); the comparison shows one row per configuration whose step
time is the median of the rounds' median steps, with a 95 % interval over steps and rounds
(`runs/scheduling/step_intervals.py`).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import uuid
from collections.abc import Sequence

from ...errors import GpkError
from ..description.synthetic_data import quick_mode
from ..results.run_result import RunResult
from .step_intervals import step_time_interval

QUICK_ROUNDS = 2
DEFAULT_ROUNDS = 3


def rounds_to_run(rounds: int | None, to_target: bool = False) -> int:
    """The rounds a comparison runs: the caller's, else GPK_ROUNDS, else 3 (2 with
    GPK_QUICK=1). A comparison that trains to a target runs once by default: each round would
    train every run to the target again, and what it compares is the time to get there."""
    if rounds is None:
        setting = os.environ.get("GPK_ROUNDS", "").strip()
        if not setting:
            if to_target:
                return 1
            return QUICK_ROUNDS if quick_mode() else DEFAULT_ROUNDS
        try:
            rounds = int(setting)
        except ValueError:
            raise GpkError(
                f"GPK_ROUNDS={setting!r} is not a whole number; set it to 1, 2 or 3"
            ) from None
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise GpkError(
            f"rounds={rounds!r} is not a positive whole number; use 1 for one run per "
            "configuration, or 3 (the default) to interleave repeated runs"
        )
    return rounds


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def tag_round(result: RunResult, round_of: tuple[int, int, str] | None) -> RunResult:
    """`result` marked as round `round_of[0]` (from 0) of `round_of[1]` of the configuration
    whose first run id is `round_of[2]`; as it is when the comparison has one round (None)."""
    if round_of is None:
        return result
    index, rounds, configuration = round_of
    extra = {**result.extra, "configuration": configuration, "round": [index + 1, rounds]}
    return dataclasses.replace(result, extra=extra)


def merge_rounds(rows: Sequence[RunResult]) -> RunResult:
    """One row for a configuration's rounds, in the order they ran.

    The finished rounds' medians give the step time (their median) and its interval; the row's
    other figures (loss curve, memory, communication, timeline) are those of the round whose
    median step is nearest that figure, so they belong to one real run. A configuration none of
    whose rounds finished keeps its last round's row, reason and all.
    """
    if len(rows) == 1 and rows[0].extra.get("round", [1, 1])[1] == 1:
        return rows[0]
    finished = [r for r in rows if r.ok and r.step_times_s and r.step_time_s]
    if not finished:
        return rows[-1]
    medians = [r.step_time_s for r in finished]
    step = statistics.median(medians)
    chosen = min(finished, key=lambda r: abs(r.step_time_s - step))
    interval = step_time_interval([r.step_times_s for r in finished])
    low, high = interval if interval is not None else (None, None)
    extra = {
        **chosen.extra,
        "rounds": len(rows),
        "rounds_finished": len(finished),
        "round_run_ids": [r.run_id for r in rows],
        "round_step_time_s": medians,
        "round_step_times_s": [list(r.step_times_s) for r in finished],
        "shown_round_run_id": chosen.run_id,
    }
    failed = [r for r in rows if not r.ok]
    if failed:
        extra["failed_rounds"] = [f"{r.status}: {r.reason}" for r in failed]
    return dataclasses.replace(
        chosen,
        step_time_s=step,
        throughput_samples_s=chosen.global_batch / step if step else None,
        step_time_ci_low_s=low,
        step_time_ci_high_s=high,
        extra=extra,
    )


def merge_logged_rounds(results: Sequence[RunResult]) -> list[RunResult]:
    """The run log's rows with each configuration's rounds merged into one (in the place of its
    first round); rows of a single run pass as they are."""
    groups: dict[str, list[RunResult]] = {}
    order: list[str | RunResult] = []
    for result in results:
        configuration = result.extra.get("configuration")
        if configuration is None:
            order.append(result)
            continue
        if configuration not in groups:
            groups[configuration] = []
            order.append(configuration)
        groups[configuration].append(result)
    return [merge_rounds(groups[item]) if isinstance(item, str) else item for item in order]
