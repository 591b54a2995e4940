"""One sentence under a comparison: which strategy and device count to pick, and why.

Derived from the table alone (measured rows first; projected rows, when present, for what other
hardware would change), with the reason named the way courses name it: compute-, communication-,
or memory-bound, or held back by shared virtual devices. A gain within the runs' own spread is
called the same within noise, never a gain. The pick among one-device runs is the baseline
(`single`): another strategy on one device only repeats its training with extra bookkeeping (a
one-replica all-reduce, a one-stage pipeline), so it is never the pick, however its figure came
out; where no baseline run finished, the advice names the baseline and quotes that run's figure.
"""

from __future__ import annotations

import pandas as pd

from ...runs.scheduling.step_intervals import includes_one, too_wide
from ...strategies import has, runnable
from ..cost_model.compute_source import uncounted
from .row_flags import flagged
from .step_breakdown import step_breakdown
from .time_to_accuracy import rows_with_target
from .within_noise import relative_spread, within_noise

COMMUNICATION_BOUND_SHARE = 0.25  # exposed communication above this share of a step
GOOD_EFFICIENCY = 0.8
TOO_FEW_STEPS = "too few steps to tell it from 1"
MORE_STEPS = (
    " Where a speedup had too few steps to tell, give it a larger measure_s= or more steps."
)


def advice(df: pd.DataFrame) -> str:
    """The recommendation, or an empty string when nothing finished; where a projection's
    compute was not counted, it says so."""
    text = _pick(df)
    if text and TOO_FEW_STEPS in text:
        text += MORE_STEPS
    projected = df[df["projected"].astype(bool)]
    not_counted = uncounted(projected["reason"]) if "reason" in df.columns else ""
    if text and not_counted and not_counted not in text:
        text += f" Projected rows: {not_counted}."
    return text


def _pick(df: pd.DataFrame) -> str:
    measured = df[~df["projected"].astype(bool) & (df["status"] == "ok")]
    if measured.empty:
        return ""
    by_target = _time_to_target_advice(measured)
    if by_target:
        return by_target
    candidates = _candidates(measured)
    best = candidates.loc[candidates["throughput_samples_s"].idxmax()]
    reference = _one_device_reference(measured)
    if reference is not None and int(best["devices"]) > 1 and _indistinct(best, reference):
        text = _same_within_noise(best, reference, df)
        return text + _the_rest(measured, df, best, text)
    pick = f"Pick {_pick_name(best, df, _figures(best))}"
    why = _why(df, measured, best)
    return f"{pick}: {why}.{_beside(best, measured, df)}{_the_rest(measured, df, best, why)}"


def _pick_name(row: pd.Series, df: pd.DataFrame, figures: str) -> str:
    """The pick as the advice names it, with its figures: a one-device run of another strategy
    is named as the baseline it repeats, with that run's throughput beside it."""
    if int(row["devices"]) == 1 and not has(row["strategy"], "baseline"):
        return (
            f"{_baseline_name()} on 1 device(s), the same training as {_name(row, df, 'device')} "
            f"({row['throughput_samples_s']:,.0f} samples/s) without its bookkeeping"
        )
    return f"{_name(row, df, 'device(s)')} ({figures})"


def _baseline_name() -> str:
    return next(record.name for record in runnable() if record.baseline)


def _one_device_reference(measured: pd.DataFrame) -> pd.Series | None:
    """The one-device run a gain is judged against, as the table's speedups are: the first
    baseline run, else the first run on one device, else none."""
    for rows in (measured[flagged(measured, "baseline")], measured[measured["devices"] == 1]):
        if not rows.empty:
            return rows.iloc[0]
    return None


def _name(row: pd.Series, df: pd.DataFrame, unit: str = "devices") -> str:
    """ "data on 2 devices", with what sets it apart from a run of the same strategy and device
    count in the table: "data on 2 devices (weak, lr×2)"."""
    name = f"{row['strategy']} on {int(row['devices'])} {unit}"
    twins = df[(df["strategy"] == row["strategy"]) & (df["devices"] == row["devices"])]
    apart = []
    if "scaling" in df.columns and twins["scaling"].nunique(dropna=True) > 1:
        apart.append(str(row["scaling"]))
    if "lr_factor" in df.columns and twins["lr_factor"].nunique(dropna=True) > 1:
        apart.append(f"lr×{row['lr_factor']:g}")
    if "backend" in df.columns and twins["backend"].nunique(dropna=True) > 1:
        apart.append(str(row["backend"]))
    return name + (f" ({', '.join(apart)})" if apart else "")


def _interval(row: pd.Series) -> tuple[float, float] | None:
    low, high = row.get("speedup_ci_low"), row.get("speedup_ci_high")
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return None
    return float(low), float(high)


def _figures(row: pd.Series) -> str:
    """The figures a pick quotes, as its row shows them: samples/s, speedup and its interval."""
    figures = f"{row['throughput_samples_s']:,.0f} samples/s"
    if pd.notna(row["speedup"]):
        figures += f", speedup {row['speedup']:.2f}"
        interval = _interval(row)
        if interval is not None and too_wide(*interval):
            figures += f", {TOO_FEW_STEPS}"
        elif interval is not None:
            figures += f", 95% interval {interval[0]:.2f}–{interval[1]:.2f}"
    return figures


def _indistinct(row: pd.Series, baseline: pd.Series) -> bool:
    """Whether the measurement cannot tell `row` from the baseline: its speedup's interval
    holds 1 where the comparison ran in rounds, else the runs' spreads overlap."""
    interval = _interval(row)
    if interval is not None:
        return includes_one(*interval)
    return within_noise(row, baseline)


def _beside(best: pd.Series, measured: pd.DataFrame, df: pd.DataFrame) -> str:
    """What a reader of the table would otherwise hold against the pick: a one-device run of
    another strategy above the baseline, or a speedup beyond the ideal."""
    notes = []
    if has(best["strategy"], "baseline"):
        others = measured[
            (measured["devices"] == 1)
            & ~flagged(measured, "baseline")
            & (measured["throughput_samples_s"] > best["throughput_samples_s"])
        ]
        for _, other in others.iterrows():
            interval = _interval(other)
            verdict = (
                "the same within noise"
                if interval is None or includes_one(*interval)
                else "a difference of its code path, not of parallelism"
            )
            notes.append(
                f" {_name(other, df, 'device').capitalize()} measured {_figures(other)}: the "
                f"same training on the same device, so {verdict}."
            )
    if bool(best.get("above_ideal", False)):
        notes.append(
            f" Its speedup is beyond the ideal {int(best['devices'])}: its devices share cores, "
            "so this says more about how the baseline used them than about scaling."
        )
    return "".join(notes)


def _candidates(measured: pd.DataFrame) -> pd.DataFrame:
    """The runs a pick may name. Beside a baseline run, another strategy on one device is that
    same training with extra bookkeeping (a one-replica all-reduce, a one-stage pipeline), so a
    higher figure there is noise and never the pick; without one, `_pick_name` names the
    baseline in its place."""
    baseline = flagged(measured, "baseline")
    if not baseline.any():
        return measured
    return measured[baseline | (measured["devices"] > 1)]


def _same_within_noise(best: pd.Series, baseline: pd.Series, df: pd.DataFrame) -> str:
    label = _name(best, df)
    interval = _interval(best)
    if interval is not None and too_wide(*interval):
        noise = TOO_FEW_STEPS
    elif interval is not None:
        noise = f"its speedup's 95% interval, {interval[0]:.2f}–{interval[1]:.2f}, holds 1"
    else:
        spread = relative_spread(best) + relative_spread(baseline)
        noise = f"the runs' step times scatter by ±{spread:.0%}"
    samples = f"{baseline['throughput_samples_s']:,.0f} samples/s"
    return (
        f"Pick {_pick_name(baseline, df, samples)}: "
        f"{label} measured {best['throughput_samples_s']:,.0f} samples/s, the same within noise "
        f"({noise}), so more devices buy nothing measurable here."
    )


def _why(df: pd.DataFrame, measured: pd.DataFrame, best: pd.Series) -> str:
    refused = df[(df["status"] == "oom") & ~df["projected"].astype(bool)]
    if not refused.empty and flagged(measured, "splits_state").any():
        return (
            "the model's state does not fit one device (memory-bound), so only the split "
            "runs could train it"
        )
    multi = measured[measured["devices"] > 1]
    if int(best["devices"]) == 1 and not multi.empty:
        top = multi.loc[multi["throughput_samples_s"].idxmax()]
        if _indistinct(top, best):
            return (
                f"{_name(top, df)} measured the same within noise ({_figures(top)}), so more "
                "devices buy nothing measurable here" + _projection_hint(df)
            )
    if multi.empty:
        return "no run used more than one device, so there is nothing to weigh it against"
    top = multi.loc[multi["throughput_samples_s"].idxmax()]
    if int(best["devices"]) == 1:
        reason = f"{_name(top, df)} was slower ({_figures(top)})"
        if bool(top["virtual"]):
            reason += (
                " because its virtual devices share the same cores, so extra devices add "
                "coordination but no compute"
            )
        else:
            reason += _bound_words(top)
        return reason + _projection_hint(df)
    if pd.isna(best["efficiency"]):  # no one-device run to take its speedup over
        return (
            "it is the fastest measured; with no single-device run beside it, how well it "
            "scales is not known: add 'single' to the comparison"
        )
    if best["efficiency"] >= GOOD_EFFICIENCY:
        return "it is compute-bound and scales well here"
    return (
        f"it is the fastest measured, but at {best['efficiency']:.0%} efficiency the devices "
        "wait on communication or the input pipeline"
    )


def _bound_words(row: pd.Series) -> str:
    """ ", communication-bound at 57 % of its step" where communication or a pipeline's bubble
    takes over `COMMUNICATION_BOUND_SHARE` of the row's step, else "". The share is the
    table's `comm_share`, the figure its comm column shows: a row that merged rounds keeps the
    share of the round it shows, which the merged step would misstate."""
    _, _, idle = step_breakdown(row)
    step = row["step_time_s"]
    share = row.get("comm_share")
    if pd.notna(share) and share > COMMUNICATION_BOUND_SHARE:
        return f", communication-bound at {share:.0%} of its step"
    if idle > COMMUNICATION_BOUND_SHARE * step:
        return f", its pipeline idle for {idle / step:.0%} of its step"
    return ""


def _the_rest(measured: pd.DataFrame, df: pd.DataFrame, best: pd.Series, said: str) -> str:
    """One sentence on every measured run on several devices the advice has not named yet, so
    that it covers each strategy and device count of the table: its speedup and what bounds
    it."""
    # A one-device run is the baseline, or the same training beside it (`_beside`).
    rest = [
        row
        for _, row in measured.iterrows()
        if row.name != best.name and int(row["devices"]) > 1
        and _name(row, df) not in said and pd.notna(row["speedup"])
    ]  # fmt: skip
    if not rest:
        return ""
    parts = []
    for row in rest:
        speedup = f"a speedup of {row['speedup']:.2f}"
        interval = _interval(row)
        if interval is not None and too_wide(*interval):
            speedup += f", {TOO_FEW_STEPS}"
        parts.append(f"{_name(row, df)} reached {speedup}{_bound_words(row)}")
    return " The other runs: " + "; ".join(parts) + "."


def _projection_hint(df: pd.DataFrame) -> str:
    projected = df[df["projected"].astype(bool) & (df["status"] == "ok")]
    if projected.empty:
        return ""
    top = projected.loc[projected["throughput_samples_s"].idxmax()]
    widest = projected.loc[projected["devices"].idxmax()]
    top = widest if widest["devices"] > top["devices"] else top
    label = str(top["experiment_id"]).rsplit(":", 1)[-1]
    why = ""
    if "bound by" in str(top["reason"]):  # counted compute says what bounds a device's step
        bound = str(top["reason"]).split("bound by", 1)[1].strip()
        why = f": each GPU's step is bound by {bound}"
        if pd.notna(top["comm_share"]) and top["comm_share"] > 0:
            why += f", and the all-reduce is {top['comm_share']:.0%} of the step"
    not_counted = uncounted([top["reason"]])
    if not_counted:
        why = f" ({not_counted})"
    return (
        f"; projected onto {label}, {top['strategy']} on {int(top['devices'])} devices would "
        f"reach a speedup of {top['speedup']:.1f}{why}"
    )


def _time_to_target_advice(measured: pd.DataFrame) -> str:
    """With a target, the pick is the run that reached it first, not the most samples/s."""
    with_target = rows_with_target(measured)
    if with_target.empty:
        return ""
    target = with_target["target"].iloc[0]
    reached = with_target[(with_target["target_reached"] == True).fillna(False)]  # noqa: E712
    if reached.empty:
        return (
            f"No run reached {target}; train for more epochs or revisit the learning rate "
            "before choosing a strategy."
        )
    candidates = _candidates(reached)
    best = candidates.loc[candidates["time_to_target_s"].idxmin()]
    reach = f"{best['time_to_target_s']:.3g} s to {target}, epoch {best['epochs_to_target']:.3g}"
    pick = f"Pick {_pick_name(best, measured, reach)}"
    fastest = with_target.loc[with_target["throughput_samples_s"].idxmax()]
    if fastest.name == best.name:
        return f"{pick}: it reached the target first and also processes the most samples/s."
    label = _name(fastest, measured)
    ratio = fastest["throughput_samples_s"] / best["throughput_samples_s"]
    if fastest["target_reached"] is not pd.NA and bool(fastest["target_reached"]):
        later = f"needed {fastest['epochs_to_target']:.3g} epochs to reach it"
    else:
        later = "never reached it"
    return f"{pick}: {label} processes {ratio:.2f}× the samples/s but {later}."
