"""Communication figures below their own noise: shown as such, never as a (negative) result.

The data engine measures exposed communication as the median step with the all-reduce minus the
median step without it, alternated in blocks, and records how far the per-block differences fall
apart (`comm_noise_s`). On shared CPU cores that difference is often smaller than its spread, or
negative: a step cannot communicate for less than nothing, so such a figure is noise, not the
price of coordination. Here it leaves `comm_time_s` and `comm_share` (None: nothing measurable)
and moves, signed, into `extra`, beside the noise it fell below; tables, plots and advice then say
"below noise (±x ms)".
"""

from __future__ import annotations

import dataclasses
import math

from ...strategies import has
from .run_result import RunResult


def settle_communication(result: RunResult) -> RunResult:
    """`result` with a communication figure below its noise moved into `extra` (idempotent).

    `extra` then holds `comm_time_raw_s` and `comm_share_raw` (the signed measurements),
    `comm_below_noise` (True) and `comm_noise_bound_s`, the noise shown: the measured
    `comm_noise_s` (kept as it was), or the raw figure's size when larger (a figure of -4 ms says
    the measurement scatters by 4 ms or more).
    """
    raw = result.comm_time_s
    if raw is None or result.projected or result.extra.get("comm_below_noise"):
        return result
    noise = result.extra.get("comm_noise_s")
    # An all-reduce over one device is a no-op: whatever it measures is the noise floor itself.
    no_op = has(result.strategy, "all_reduce") and result.devices <= 1
    below = raw < 0 or no_op or (noise is not None and not math.isnan(noise) and raw <= noise)
    if not below:
        return result
    extra = {
        **result.extra,
        "comm_time_raw_s": raw,
        "comm_share_raw": result.comm_share,
        "comm_below_noise": True,
        "comm_noise_bound_s": max(abs(raw), noise if noise is not None else 0.0),
    }
    return dataclasses.replace(result, comm_time_s=None, comm_share=None, extra=extra)


def shown_noise(extra: dict) -> float | None:
    """The noise a figure is shown against: the bound for a settled figure, else as measured."""
    return extra.get("comm_noise_bound_s", extra.get("comm_noise_s"))


def noise_text(noise_s: float | None) -> str:
    """ "below noise (±0.35 ms)": how a figure under its noise is shown everywhere."""
    if noise_s is None or math.isnan(noise_s):
        return "below noise"
    return f"below noise (±{noise_s * 1000:.2g} ms)"
