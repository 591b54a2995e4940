"""A target a run's metric must reach (`val_accuracy >= 0.9`): parsed and checked in the caller,
recorded in each row, judged by `analysis.tables.time_to_accuracy` against the curves a run
recorded."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import GpkError

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
