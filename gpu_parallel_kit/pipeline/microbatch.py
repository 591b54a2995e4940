"""The micro-batch efficiency curve, and `micro_batches="auto"`: the M a schedule runs best with.

More micro-batches shrink the bubble, (K-1)/(M+K-1) for gpipe and 1f1b, but each micro-batch runs
less efficiently: a 16-row micro-batch can cost twice as much per sample as the whole batch,
because every task pays a fixed cost (dispatch, kernel launches, weights read once per call)
whatever its size. Guessing M trades one against the other blindly, so the worker measures the
trade instead: each stage's forward and backward (and weight-gradient) task is timed alone at the
micro-batch sizes the schedule could use (`Curve`), and `choose` replays the schedule on paper
(`simulation.simulate`) for every valid M with those task times and the bytes that cross each
cut, and keeps the M whose step is shortest. A user's explicit M always wins; the choice says what
auto would have picked.

Pure logic on plain numbers, no TensorFlow: the worker measures, this module decides.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import GpkError, whole_number
from .schedules import SCHEDULES, build_schedule, check_plan
from .simulation import bubble_fraction, simulate, theoretical_bubble
from .tasks import FORWARD, WEIGHT, Task

AUTO = "auto"
# Beyond 8 micro-batches per device the bubble of gpipe and 1f1b is below 1/9 of the step and
# shrinks little more, while measuring each further size costs time: auto looks no further.
MAX_PER_DEVICE = 8


def is_auto(micro_batches: object) -> bool:
    """Whether `micro_batches` asks the kit to choose M."""
    return isinstance(micro_batches, str) and micro_batches.strip().lower() == AUTO


def check_micro_batches(micro_batches: object) -> int | str:
    """A whole number of micro-batches (1 or more) or "auto"; anything else is one sentence."""
    if isinstance(micro_batches, str):
        if is_auto(micro_batches):
            return AUTO
        raise GpkError(
            f"micro_batches={micro_batches!r} is not a count; use a whole number such as 4, or "
            "'auto' to choose it from the measured micro-batch curve"
        )
    return whole_number(micro_batches, "micro_batches", hint="or 'auto'")


def candidates(schedule: str, stages: int, batch: int, virtual_stages: int = 1) -> tuple[int, ...]:
    """Every M auto tries for this plan, smallest first.

    Naive runs one micro-batch; otherwise M divides the global batch (micro-batches are equal),
    interleaved needs M to be a multiple of the K devices, and M stays at most 8 K (see
    `MAX_PER_DEVICE`) and at most the batch.
    """
    whole_number(batch, "batch_size")
    if schedule not in SCHEDULES or schedule == "naive":
        check_plan(schedule, stages, 1, virtual_stages)  # an unknown name is one sentence
        return (1,)
    whole_number(stages, "stages")
    limit = min(batch, MAX_PER_DEVICE * stages)
    found = tuple(
        m
        for m in range(1, limit + 1)
        if batch % m == 0 and (schedule != "interleaved" or m % stages == 0)
    )
    if not found:
        raise GpkError(
            f"batch_size={batch} splits into no multiple of the {stages} devices that "
            f"schedule='interleaved' needs; use a batch_size that is a multiple of {stages}, "
            f"e.g. {stages * max(1, round(batch / stages))}"
        )
    for m in found:
        check_plan(schedule, stages, m, virtual_stages)
    return found


def sizes(schedule: str, stages: int, batch: int, virtual_stages: int = 1) -> tuple[int, ...]:
    """The micro-batch sizes to time for this plan, largest first: the whole batch (the
    reference every per-sample cost is compared with) and each candidate's share."""
    shares = {batch // m for m in candidates(schedule, stages, batch, virtual_stages)}
    return tuple(sorted(shares | {batch}, reverse=True))


@dataclass(frozen=True)
class CurvePoint:
    """One task kind of one stage, timed alone at one micro-batch size."""

    stage: int  # model stage, from 0
    kind: str  # "F", "B" or "W"
    size: int  # samples in the micro-batch
    seconds: float  # median time of the task alone, copies across the cut excluded

    def __post_init__(self) -> None:
        if self.size < 1 or not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise GpkError(
                f"curve point {self} is not usable; give a size of 1 or more and a finite "
                "time of 0 or more"
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

    def seconds(self, stage: int, kind: str, size: float) -> float:
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "points": [
                {"stage": p.stage, "kind": p.kind, "size": p.size, "seconds": p.seconds}
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
            tuple(CurvePoint(**p) for p in data["points"]),
            tuple(data.get("cut_bytes_per_sample", ())),
            float(data.get("seconds_per_byte", 0.0)),
            float(data.get("cost_s", 0.0)),
        )


def simulated_step(
    curve: Curve,
    schedule: str,
    stages: int,
    micro_batches: int,
    batch: int,
    virtual_stages: int = 1,
) -> tuple[float, float]:
    """(step seconds, idle share) of `schedule` with M micro-batches of batch/M samples, each
    task taking the curve's time and each crossing its bytes' copy time. The optimizer update,
    the same for every M, is left out."""
    plan = build_schedule(schedule, stages, micro_batches, virtual_stages)
    size = batch / micro_batches

    def sent(task: Task) -> float:
        # A forward's output crosses the cut below its stage, a backward's the cut above.
        if task.kind == WEIGHT:
            return 0.0
        cut = task.stage if task.kind == FORWARD else task.stage - 1
        return curve.transfer_s(cut, size)

    timed = simulate(plan, lambda t: curve.seconds(t.stage, t.kind, size), sent)
    step = max(t.end for t in timed) - min(t.start for t in timed)
    return step, bubble_fraction(timed, stages)


@dataclass(frozen=True)
class Option:
    """One M replayed on the curve."""

    micro_batches: int
    step_s: float  # simulated step, updates left out
    bubble: float  # the schedule's theoretical idle share at this M
    per_sample_ratio: float  # per-sample cost at batch/M over the whole batch's

    def to_dict(self) -> dict[str, Any]:
        return {
            "micro_batches": self.micro_batches,
            "step_s": self.step_s,
            "bubble": self.bubble,
            "per_sample_ratio": self.per_sample_ratio,
        }


@dataclass(frozen=True)
class Choice:
    """The M a run uses, every M auto weighed, and why, in one sentence."""

    micro_batches: int  # the M the run uses
    auto: bool  # chosen by the kit (True) or given by the user
    best: int  # the M auto picks: the argmin of the simulated step
    options: tuple[Option, ...]  # every candidate, smallest M first
    reason: str

    def option(self, micro_batches: int) -> Option:
        return next(o for o in self.options if o.micro_batches == micro_batches)

    def to_dict(self) -> dict[str, Any]:
        return {
            "micro_batches": self.micro_batches,
            "auto": self.auto,
            "best": self.best,
            "options": [o.to_dict() for o in self.options],
            "reason": self.reason,
        }


def weigh(
    curve: Curve,
    schedule: str,
    stages: int,
    batch: int,
    virtual_stages: int = 1,
    extra: Iterable[int] = (),
) -> tuple[Option, ...]:
    """Every candidate M (and the `extra` ones, such as a user's M beyond auto's range)
    replayed on the curve, smallest M first."""
    whole = curve.per_sample(batch)
    chosen = sorted(set(candidates(schedule, stages, batch, virtual_stages)) | set(extra))
    options = []
    for m in chosen:
        step, _ = simulated_step(curve, schedule, stages, m, batch, virtual_stages)
        options.append(
            Option(
                micro_batches=m,
                step_s=step,
                bubble=theoretical_bubble(schedule, stages, m, virtual_stages),
                per_sample_ratio=curve.per_sample(batch / m) / whole if whole > 0 else 1.0,
            )
        )
    return tuple(options)


def choose(
    curve: Curve,
    schedule: str,
    stages: int,
    batch: int,
    virtual_stages: int = 1,
    given: int | str | None = AUTO,
) -> Choice:
    """The M with the shortest simulated step (the smaller M on a tie: fewer tasks, less
    memory held), or the user's `given` M with what auto would have picked."""
    auto = given is None or is_auto(given)
    extra = () if auto else (whole_number(given, "micro_batches"),)
    options = weigh(curve, schedule, stages, batch, virtual_stages, extra)
    valid = candidates(schedule, stages, batch, virtual_stages)
    auto_options = [o for o in options if o.micro_batches in valid]
    best = min(auto_options, key=lambda o: (o.step_s, o.micro_batches))
    used = best if auto else next(o for o in options if o.micro_batches == given)
    reason = _reason(schedule, best, options)
    if not auto:
        reason = f"M={used.micro_batches} as given; auto would choose {reason}"
    return Choice(used.micro_batches, auto, best.micro_batches, options, reason)


def _reason(schedule: str, best: Option, options: tuple[Option, ...]) -> str:
    """ "M=4: simulated step 31.2 ms, bubble 0.43, per-sample cost 1.3× the whole batch's; M=8
    would be 0.27 and 2.1× (35.0 ms)", the next larger M (else the next smaller) beside it."""
    head = (
        f"M={best.micro_batches}: simulated step {best.step_s * 1e3:.3g} ms, bubble "
        f"{best.bubble:.2f}, per-sample cost {best.per_sample_ratio:.2g}× the whole batch's"
    )
    if len(options) == 1:
        return f"{head}; schedule '{schedule}' runs one micro-batch"
    ms = [o.micro_batches for o in options]
    at = ms.index(best.micro_batches)
    other = options[at + 1] if at + 1 < len(options) else options[at - 1]
    return (
        f"{head}; M={other.micro_batches} would be {other.bubble:.2f} and "
        f"{other.per_sample_ratio:.2g}× ({other.step_s * 1e3:.3g} ms)"
    )


__all__ = [
    "AUTO",
    "Choice",
    "Curve",
    "CurvePoint",
    "Option",
    "candidates",
    "check_micro_batches",
    "choose",
    "is_auto",
    "simulated_step",
    "sizes",
    "weigh",
]
