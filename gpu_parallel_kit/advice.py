"""One sentence under a comparison: which strategy and device count to pick, and why.

Derived from the table alone (measured rows first; projected rows, when present, for what other
hardware would change), with the reason named the way courses name it: compute-, communication-,
or memory-bound, or held back by shared virtual devices.
"""

from __future__ import annotations

import pandas as pd

from .breakdown import step_breakdown

COMMUNICATION_BOUND_SHARE = 0.25  # exposed communication above this share of a step
GOOD_EFFICIENCY = 0.8


def advice(df: pd.DataFrame) -> str:
    """The recommendation, or an empty string when nothing finished."""
    measured = df[~df["projected"].astype(bool) & (df["status"] == "ok")]
    if measured.empty:
        return ""
    best = measured.loc[measured["throughput_samples_s"].idxmax()]
    pick = f"Pick {best['strategy']} on {int(best['devices'])} device(s)"
    figures = f"{best['throughput_samples_s']:,.0f} samples/s"
    if pd.notna(best["speedup"]):
        figures += f", speedup {best['speedup']:.2f}"
    return f"{pick} ({figures}): {_why(df, measured, best)}."


def _why(df: pd.DataFrame, measured: pd.DataFrame, best: pd.Series) -> str:
    refused = df[(df["status"] == "oom") & ~df["projected"].astype(bool)]
    if not refused.empty and (measured["strategy"] == "model").any():
        return (
            "the model's state does not fit one device (memory-bound), so only the split "
            "runs could train it"
        )
    multi = measured[measured["devices"] > 1]
    if multi.empty:
        return "no run used more than one device, so there is nothing to weigh it against"
    top = multi.loc[multi["throughput_samples_s"].idxmax()]
    compute, comm, idle = step_breakdown(top)
    step = top["step_time_s"]
    if int(best["devices"]) == 1:
        reason = f"{top['strategy']} on {int(top['devices'])} devices was slower"
        if bool(top["virtual"]):
            reason += (
                " because its virtual devices share the same cores, so extra devices add "
                "coordination but no compute"
            )
        elif comm > COMMUNICATION_BOUND_SHARE * step:
            reason += f" (communication-bound: {comm / step:.0%} of its step)"
        elif idle > COMMUNICATION_BOUND_SHARE * step:
            reason += f" (pipeline bubble: {idle / step:.0%} of its step idle)"
        return reason + _projection_hint(df)
    if pd.notna(best["efficiency"]) and best["efficiency"] >= GOOD_EFFICIENCY:
        return "it is compute-bound and scales well here"
    return (
        f"it is the fastest measured, but at {best['efficiency']:.0%} efficiency the devices "
        "wait on communication or the input pipeline"
    )


def _projection_hint(df: pd.DataFrame) -> str:
    projected = df[df["projected"].astype(bool) & (df["status"] == "ok")]
    if projected.empty:
        return ""
    top = projected.loc[projected["throughput_samples_s"].idxmax()]
    label = str(top["experiment_id"]).rsplit(":", 1)[-1]
    return (
        f"; projected onto {label}, {top['strategy']} on {int(top['devices'])} devices would "
        f"reach a speedup of {top['speedup']:.1f}"
    )
