"""Time to accuracy on plain data: targets, the curves a run recorded, and when each reached it.

Samples per second alone mislead: a run that is 3× faster per sample but needs twice the epochs
is 1.5× faster, not 3×. So every run records, beside its step times, the value of its loss and
metrics after each epoch (and each validation evaluation, with its timestamp), and the caller
works out here when a run first met a target such as `val_accuracy >= 0.9`.

Times are seconds of training since the first step began, with two one-off costs left out: the
kit's own evaluations (the worker pauses its clock for them) and the first step's tracing and
compilation (`compile_time_s`: its time beyond a median step), which the step-time statistics
leave out as warm-up too and which would otherwise swamp a short run. A target is judged at the
evaluations only, so its resolution is the evaluation interval (`validation_every_steps`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ...runs.description.accuracy_target import Target

# ---- the curves a run recorded -----------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One recorded value of a metric: after `epoch` epochs (fractional between epoch ends),
    `time_s` seconds of training (evaluations excluded) since the first step began."""

    epoch: float
    time_s: float
    value: float


def metric_series(result: Any, metric: str) -> list[Point]:
    """The recorded values of `metric` in a RunResult (or anything with the same fields).

    Validation metrics (`val_*`) come from the evaluations; training metrics from the per-epoch
    history and its timestamps. Times leave out the first step's compilation (`compile_time_s`).
    Empty when the run did not record the metric.
    """
    offset = getattr(result, "compile_time_s", None) or 0.0
    evaluations = getattr(result, "evaluations", ()) or ()
    points = [
        Point(float(e["epoch"]), max(0.0, float(e["time_s"]) - offset), float(e[metric]))
        for e in evaluations
        if metric in e and e[metric] is not None
    ]
    if points:
        return points
    values = (getattr(result, "history", {}) or {}).get(metric) or []
    times = getattr(result, "history_time_s", ()) or ()
    return [
        Point(float(i + 1), max(0.0, float(t) - offset), float(v))
        for i, (t, v) in enumerate(zip(times, values, strict=False))
    ]


def recorded_metrics(result: Any) -> list[str]:
    """Every metric name a run recorded with timestamps, training ones first."""
    names = list((getattr(result, "history", {}) or {}).keys())
    for evaluation in getattr(result, "evaluations", ()) or ():
        names.extend(k for k in evaluation if k.startswith("val_"))
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Reach:
    """When a run first met its target; `reached` False (and the figures None) when it never did."""

    reached: bool
    time_s: float | None = None
    epoch: float | None = None
    recorded: bool = True  # False when the run recorded no value of the target's metric


def time_to_target(points: Sequence[Point], target: Target) -> Reach:
    """The first recorded point that meets the target: its time and epoch.

    >>> time_to_target([Point(1, 2.0, 0.7), Point(2, 4.0, 0.92)], Target("acc", 0.9, "above"))
    Reach(reached=True, time_s=4.0, epoch=2.0, recorded=True)
    """
    if not points:
        return Reach(False, recorded=False)
    for point in points:
        if target.met_by(point.value):
            return Reach(True, point.time_s, point.epoch)
    return Reach(False)


def reach_of(result: Any) -> Reach | None:
    """When a RunResult first met its own target; None when it has none."""
    target = Target.from_dict(getattr(result, "target", {}) or {})
    if target is None:
        return None
    return time_to_target(metric_series(result, target.metric), target)


# ---- the sentence under a comparison -----------------------------------------------------------


def rows_with_target(df: Any) -> Any:
    """The rows of a comparison table whose run had a target (none when the column is missing)."""
    if "target" not in df.columns:
        return df.iloc[0:0]
    return df[df["target"].fillna("").astype(str) != ""]


def has_convergence(df: Any) -> bool:
    """Whether any run of a comparison table had a target or a learning-rate rule: then its text
    tables and panel add the time-to-target columns."""
    rules = "lr_scaling" in df.columns and (df["lr_scaling"].fillna("none") != "none").any()
    return bool(rules or not rows_with_target(df).empty)


def convergence_summary(df: Any) -> str:
    """One or two sentences: the learning-rate rule as applied, and who reached the target when.

    Built from the comparison table (`comparison_table.comparison_table`), so it reads the same
    figures.
    """
    if df is None or len(df) == 0 or "target" not in df.columns:
        return ""
    measured = df[~df["projected"].astype(bool)] if "projected" in df.columns else df
    sentences = [_lr_sentence(measured), _target_sentence(measured)]
    return " ".join(s for s in sentences if s)


def _lr_sentence(df: Any) -> str:
    if "lr_scaling" not in df.columns or not (df["lr_scaling"] != "none").any():
        return ""
    strong = df[df["scaling"] == "strong"]
    if len(strong) and len(strong) == len(df):
        return (
            "Strong scaling keeps the global batch, so the learning rate is kept too "
            "(lr_scaling applies when the global batch grows, with scaling='weak')."
        )
    rules = ", ".join(sorted({str(r) for r in df["lr_scaling"] if r != "none"}))
    kept = "; strong-scaling runs keep it" if len(strong) else ""
    return (
        f"Learning rate scaled by the {rules} rule where the global batch grew "
        f"(k = global batch / batch_size){kept}."
    )


def _target_sentence(df: Any) -> str:
    with_target = rows_with_target(df)
    if with_target.empty:
        return ""
    target = str(with_target["target"].iloc[0])
    parts = []
    for _, row in with_target.iterrows():
        label = f"{row['strategy']}×{row['devices']}"
        if row["status"] != "ok":
            parts.append(f"{label} {row['status']}")
        elif _true(row.get("target_reached")):
            speedup = row.get("time_to_target_speedup")
            faster = (
                f", {speedup:.2f}× speedup in time to target"
                if isinstance(speedup, float) and not math.isnan(speedup) and row["devices"] > 1
                else ""
            )
            parts.append(
                f"{label} in {row['time_to_target_s']:.3g} s "
                f"(epoch {row['epochs_to_target']:.3g}{faster})"
            )
        else:
            parts.append(f"{label} not reached")
    return f"Target {target}: " + "; ".join(parts) + "."


def _true(value: Any) -> bool:
    """True for a true cell; False for false, missing (pandas NA) or None."""
    try:
        return bool(value)
    except TypeError:  # pandas.NA refuses to be a bool
        return False


def convergence_cells(result: Any) -> dict[str, object]:
    """A run's time-to-accuracy cells in the comparison table (analysis/tables/comparison_table.py);
    the speedup in time to target needs the baseline, so the table fills it in afterwards."""

    def number(value: float | None) -> float:
        return math.nan if value is None else float(value)

    target = Target.from_dict(result.target)
    reach = reach_of(result) if result.ok else None
    return {
        "learning_rate": number(result.learning_rate),
        "lr_scaling": result.lr_scaling,
        "lr_factor": number(result.lr_factor),
        "warmup_epochs": number(result.warmup_epochs),
        "target": str(target) if target else "",
        "target_reached": pd.NA if reach is None else reach.reached,
        "time_to_target_s": number(reach.time_s if reach else None),
        "epochs_to_target": number(reach.epoch if reach else None),
        "time_to_target_speedup": math.nan,
    }
