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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import GpkError

DIRECTIONS = ("above", "below")
# Names that go down as a model learns, and names that go up; checked as whole words of the name.
_LOWER_IS_BETTER = (
    "loss",
    "error",
    "crossentropy",
    "mse",
    "mae",
    "mape",
    "msle",
    "rmse",
    "hinge",
    "perplexity",
    "divergence",
    "kld",
)
_HIGHER_IS_BETTER = (
    "accuracy",
    "acc",
    "auc",
    "precision",
    "recall",
    "f1",
    "fbeta",
    "iou",
    "r2",
    "score",
)
_TEXT_FORM = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(>=|<=|>|<|=)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Target:
    """A value a metric must reach: at least `value` (above) or at most `value` (below).

    >>> Target("val_accuracy", 0.9, "above").met_by(0.93)
    True
    """

    metric: str  # a recorded name: loss, accuracy, val_loss, val_accuracy, ...
    value: float
    direction: str  # above: the metric must reach value or more; below: value or less

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise GpkError(
                f"target direction {self.direction!r} is not known; use 'above' or 'below'"
            )

    def met_by(self, value: float | None) -> bool:
        if value is None or math.isnan(value):
            return False
        return value >= self.value if self.direction == "above" else value <= self.value

    def __str__(self) -> str:
        return f"{self.metric} {'>=' if self.direction == 'above' else '<='} {self.value:g}"

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "value": self.value, "direction": self.direction}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Target | None:
        """A target stored in a result; None for results without one."""
        if not data:
            return None
        return cls(str(data["metric"]), float(data["value"]), str(data["direction"]))


def infer_direction(metric: str) -> str | None:
    """`below` for losses and errors, `above` for accuracies and scores, None when unclear."""
    words = [w for w in re.split(r"[^a-z0-9]+", metric.lower()) if w and w != "val"]
    if any(w in _LOWER_IS_BETTER or w.endswith("loss") for w in words):
        return "below"
    if any(w in _HIGHER_IS_BETTER or w.endswith("accuracy") for w in words):
        return "above"
    return None


def parse_target(target: Any) -> Target | None:
    """Accept `{"val_accuracy": 0.9}`, `{"val_loss": (0.3, "below")}`, a `Target`, or text such as
    "val_accuracy=0.9" or "val_loss<=0.3"; the direction comes from the name unless given.

    >>> str(parse_target({"val_accuracy": 0.9}))
    'val_accuracy >= 0.9'
    >>> str(parse_target("val_loss<0.25"))
    'val_loss <= 0.25'
    """
    if target is None or isinstance(target, Target):
        return target
    if isinstance(target, str):
        return _parse_text(target)
    if isinstance(target, Mapping):
        if len(target) != 1:
            raise GpkError(
                f"target={dict(target)!r} must name one metric, e.g. {{'val_accuracy': 0.9}}"
            )
        ((metric, goal),) = target.items()
        if not isinstance(metric, str) or not metric:
            raise GpkError(f"target={dict(target)!r} must be keyed by a metric name")
        direction = None
        if isinstance(goal, tuple | list):
            if len(goal) != 2 or goal[1] not in DIRECTIONS:
                raise GpkError(
                    f"target={dict(target)!r}: give a number, or (number, 'above' or 'below')"
                )
            goal, direction = goal
        return _target(metric, goal, direction)
    raise TypeError(
        f"target={target!r} must be a dict such as {{'val_accuracy': 0.9}} or text such as "
        "'val_loss<=0.3'"
    )


def _parse_text(text: str) -> Target:
    match = _TEXT_FORM.match(text)
    if not match:
        raise GpkError(
            f"target {text!r} is not understood; write it like val_accuracy=0.9 or val_loss<=0.3"
        )
    metric, operator, number = match.groups()
    direction = {"=": None, ">=": "above", ">": "above", "<=": "below", "<": "below"}[operator]
    try:
        value = float(number)
    except ValueError:
        raise GpkError(f"target {text!r}: {number!r} is not a number") from None
    return _target(metric, value, direction)


def _target(metric: str, goal: Any, direction: str | None) -> Target:
    if isinstance(goal, bool) or not isinstance(goal, int | float) or not math.isfinite(goal):
        raise GpkError(f"target {metric}={goal!r} needs a finite number, e.g. {metric}=0.9")
    direction = direction or infer_direction(metric)
    if direction is None:
        raise GpkError(
            f"target {metric!r}: cannot tell whether it should go up or down; give "
            f"{{'{metric}': ({goal}, 'above')}} or {{'{metric}': ({goal}, 'below')}}"
        )
    return Target(metric, float(goal), direction)


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

    Built from the comparison table (`tables.comparison_table`), so it reads the same figures.
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
