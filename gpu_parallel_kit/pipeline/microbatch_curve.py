"""The micro-batch curve as data: each stage's task time against micro-batch size, round by round.

The worker times every task alone at each size in rounds, each round going over every size back
to back, so load from elsewhere touches the sizes of one round alike. A point keeps its time in
every round (`CurvePoint.samples`, in round order) and its fastest (`seconds`): the fastest is
the curve, the rounds are what lets `microbatch.choose` compare two M's within the same
measurement and see their noise.

Pure logic on plain numbers, no TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import GpkError
from .tasks import Pass


@dataclass(frozen=True)
class CurvePoint:
    """One task kind of one stage, timed alone at one micro-batch size."""

    stage: int  # model stage, from 0
    kind: Pass
    size: int  # samples in the micro-batch
    seconds: float  # the task alone, copies across the cut excluded: its fastest round
    samples: tuple[float, ...] = ()  # its time in each timed round, in the rounds' order

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Pass(self.kind))  # frozen: "F" read back as a Pass
        usable = all(math.isfinite(s) and s >= 0 for s in (self.seconds, *self.samples))
        if self.size < 1 or not usable:
            raise GpkError(
                f"curve point {self} is not usable; give a size of 1 or more and finite "
                "times of 0 or more"
            )


@dataclass(frozen=True)
class Curve:
    """Task time against micro-batch size for every stage of one model's cut, on one device kind.

    >>> c = Curve((CurvePoint(0, "F", 8, 1.0), CurvePoint(0, "F", 4, 0.75)))
    >>> c.seconds(0, "F", 4), c.per_sample(4) / c.per_sample(8)
    (0.75, 1.5)
    """

    points: tuple[CurvePoint, ...]
    cut_bytes_per_sample: tuple[float, ...] = ()  # per cut: activation bytes each way
    seconds_per_byte: float = 0.0  # one copy across a cut, as measured
    cost_s: float = 0.0  # wall time the measurement took

    def __post_init__(self) -> None:
        if not self.points:
            raise GpkError("a micro-batch curve needs at least one timed task; time some first")

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(sorted({p.size for p in self.points}))

    @property
    def stages(self) -> int:
        return 1 + max(p.stage for p in self.points)

    def seconds(self, stage: int, kind: Pass, size: float) -> float:
        """The task's time at `size`: measured, or on the line through the two nearest sizes
        (task time is close to affine in the size: a fixed cost plus a cost per sample)."""
        known = sorted(
            (p.size, p.seconds) for p in self.points if (p.stage, p.kind) == (stage, kind)
        )
        if not known:
            raise GpkError(
                f"the curve has no {kind} task for stage {stage}; measure it with the schedule "
                "that runs it"
            )
        for measured, seconds in known:
            if measured == size:
                return seconds
        if len(known) == 1:
            return known[0][1] * size / known[0][0]
        nearest = sorted(known, key=lambda point: abs(point[0] - size))[:2]
        (n0, t0), (n1, t1) = sorted(nearest)
        return max(0.0, t0 + (t1 - t0) * (size - n0) / (n1 - n0))

    def per_sample(self, size: float, stage: int | None = None) -> float:
        """Seconds per sample of every task kind at `size`, on one stage or summed over all."""
        stages = range(self.stages) if stage is None else (stage,)
        kinds = {p.kind for p in self.points}
        return math.fsum(self.seconds(s, k, size) for s in stages for k in kinds) / size

    def transfer_s(self, cut: int, size: float) -> float:
        """One copy of a micro-batch's activations (or their gradients) across `cut`."""
        if not 0 <= cut < len(self.cut_bytes_per_sample):
            return 0.0
        return self.cut_bytes_per_sample[cut] * size * self.seconds_per_byte

    def rounds(self, size: int) -> int:
        """The timed rounds every task at `size` has; 0 for a curve that kept none."""
        return min((len(p.samples) for p in self.points if p.size == size), default=0)

    def in_round(self, size: int, index: int) -> Curve:
        """The tasks at `size` alone, each at its time in round `index`."""
        return replace(
            self,
            points=tuple(
                replace(p, seconds=p.samples[index], samples=())
                for p in self.points
                if p.size == size
            ),
        )

    def with_rounds(
        self, more: Mapping[tuple[int, Pass, int], Sequence[float]], cost_s: float = 0.0
    ) -> Curve:
        """This curve with further rounds, {(stage, kind, size): times}, after each point's own;
        a point's time stays its fastest round."""
        points = []
        for p in self.points:
            samples = (*p.samples, *more.get((p.stage, p.kind, p.size), ()))
            points.append(replace(p, seconds=min(samples, default=p.seconds), samples=samples))
        return replace(self, points=tuple(points), cost_s=self.cost_s + cost_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "points": [
                {
                    "stage": p.stage,
                    "kind": str(p.kind),
                    "size": p.size,
                    "seconds": p.seconds,
                    "samples": list(p.samples),
                }
                for p in self.points
            ],
            "cut_bytes_per_sample": list(self.cut_bytes_per_sample),
            "seconds_per_byte": self.seconds_per_byte,
            "cost_s": self.cost_s,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Curve:
        """The inverse of `to_dict`, e.g. a row's `extra["microbatch_curve"]`."""
        return cls(
            tuple(
                CurvePoint(**{**p, "samples": tuple(p.get("samples", ()))}) for p in data["points"]
            ),
            tuple(data.get("cut_bytes_per_sample", ())),
            float(data.get("seconds_per_byte", 0.0)),
            float(data.get("cost_s", 0.0)),
        )
