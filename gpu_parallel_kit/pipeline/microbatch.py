"""The micro-batch efficiency curve, and `micro_batches="auto"`: the M a schedule runs best with.

More micro-batches shrink the bubble, but each runs less efficiently. The worker times each
stage's tasks at every size the schedule could use (`Curve`); `choose` replays the schedule for
every valid M and keeps an M only when it beats the fewest micro-batches beyond the noise of
paired rounds (`Margin`). docs/strategies/pipeline.md explains the rule. Pure logic, no
TensorFlow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import GpkError, whole_number
from .microbatch_curve import Curve, CurvePoint
from .schedules import build_schedule, check_plan, schedule_record
from .simulation import bubble_fraction, simulate, theoretical_bubble
from .tasks import Task

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
    """Every M auto tries for this plan, smallest first: M divides the batch, is a multiple of
    K for interleaved, and at most 8 K (`MAX_PER_DEVICE`); naive runs one."""
    whole_number(batch, "batch_size")
    record = schedule_record(schedule)  # an unknown name is one sentence
    if not record.micro_batches:
        check_plan(schedule, stages, 1, virtual_stages)
        return (1,)
    whole_number(stages, "stages")
    limit = min(batch, MAX_PER_DEVICE * stages)
    found = tuple(
        m
        for m in range(1, limit + 1)
        # model chunks go round the devices in groups of K micro-batches
        if batch % m == 0 and (not record.virtual_stages or m % stages == 0)
    )
    if not found:
        raise GpkError(
            f"batch_size={batch} splits into no multiple of the {stages} devices that "
            f"schedule={schedule!r} needs; use a batch_size that is a multiple of {stages}, "
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

    model_stages = stages * virtual_stages

    def sent(task: Task) -> float:
        message = task.sent(model_stages)
        return 0.0 if message is None else curve.transfer_s(message.cut, size)

    timed = simulate(plan, lambda t: curve.seconds(t.stage, t.kind, size), sent)
    step = max(t.end for t in timed) - min(t.start for t in timed)
    return step, bubble_fraction(timed, stages)


@dataclass(frozen=True)
class Option:
    """One M replayed on the curve."""

    micro_batches: int
    step_s: float  # the step on the curve: calls and copies, no updates or per-task cost
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
class Margin:
    """How much shorter one M's step on the curve is than another's, paired round by round:
    a burst of load lengthens both in a round, so their share stays; its spread is the noise."""

    micro_batches: int
    against: int
    shorter: float  # median over the rounds of 1 - step(M) / step(against); below 0: longer
    noise: float  # the share's median distance from its median over the rounds
    rounds: int  # rounds the two M share; 0 for a curve that kept none
    step_s: float = 0.0  # M's step on the curve, median over those rounds
    against_s: float = 0.0  # the other M's, likewise

    @property
    def beyond_noise(self) -> bool:
        return self.shorter > self.noise

    def text(self) -> str:
        """ "38% ± 4% shorter", without the noise under two rounds."""
        spread = f" ± {_percent(self.noise)}" if self.rounds > 1 else ""
        word = "shorter" if self.shorter >= 0 else "longer"
        return f"{_percent(abs(self.shorter))}{spread} {word}"

    def over(self) -> str:
        """ " over 5 paired rounds", or nothing for a curve that kept none."""
        return f" over {self.rounds} paired rounds" if self.rounds else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "micro_batches": self.micro_batches,
            "against": self.against,
            "shorter": self.shorter,
            "noise": self.noise,
            "rounds": self.rounds,
            "step_s": self.step_s,
            "against_s": self.against_s,
        }


@dataclass(frozen=True)
class Choice:
    """The M a run uses, every M auto weighed, and why, in one sentence."""

    micro_batches: int  # the M the run uses
    auto: bool  # chosen by the kit (True) or given by the user
    best: int  # the M auto picks: shorter than the fewest micro-batches beyond noise, else those
    options: tuple[Option, ...]  # every candidate, smallest M first
    reason: str
    against: int = 1  # the fewest micro-batches the schedule takes: what every M must beat
    margin: Margin | None = None  # `best` against them, or, when none beat them, the closest
    measure_again: tuple[int, ...] = ()  # M's within noise of the decision: worth more rounds

    def option(self, micro_batches: int) -> Option:
        return next(o for o in self.options if o.micro_batches == micro_batches)

    def to_dict(self) -> dict[str, Any]:
        return {
            "micro_batches": self.micro_batches,
            "auto": self.auto,
            "best": self.best,
            "options": [o.to_dict() for o in self.options],
            "reason": self.reason,
            "against": self.against,
            "margin": None if self.margin is None else self.margin.to_dict(),
            "measure_again": list(self.measure_again),
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


def margin(
    curve: Curve,
    schedule: str,
    stages: int,
    batch: int,
    micro_batches: int,
    against: int,
    virtual_stages: int = 1,
) -> Margin:
    """How much shorter M's simulated step is than `against`'s, in each round both sizes were
    timed in (on the fastest times, noise 0, when the curve kept no rounds)."""
    mine, theirs = batch // micro_batches, batch // against
    shared = min(curve.rounds(mine), curve.rounds(theirs))

    def step(c: Curve, m: int) -> float:
        return simulated_step(c, schedule, stages, m, batch, virtual_stages)[0]

    pairs = (
        [
            (step(curve.in_round(mine, r), micro_batches), step(curve.in_round(theirs, r), against))
            for r in range(shared)
        ]
        if shared
        else [(step(curve, micro_batches), step(curve, against))]
    )
    shares = [1.0 - a / b if b > 0 else 0.0 for a, b in pairs]
    middle = _median(shares)
    # The median distance from the median: a burst in one round of many moves it little.
    return Margin(
        micro_batches,
        against,
        middle,
        _median([abs(x - middle) for x in shares]),
        shared,
        _median([a for a, _ in pairs]),
        _median([b for _, b in pairs]),
    )


def _median(values: list[float]) -> float:
    ordered, half = sorted(values), len(values) // 2
    return ordered[half] if len(values) % 2 else (ordered[half - 1] + ordered[half]) / 2


def choose(
    curve: Curve,
    schedule: str,
    stages: int,
    batch: int,
    virtual_stages: int = 1,
    given: int | str | None = AUTO,
) -> Choice:
    """The M that beats the fewest micro-batches by the widest margin beyond noise, else the
    fewest; or the user's `given` M, with what auto would pick. M's within noise of the
    decision are named in `measure_again`."""
    auto = given is None or is_auto(given)
    extra = () if auto else (whole_number(given, "micro_batches"),)
    options = weigh(curve, schedule, stages, batch, virtual_stages, extra)
    valid = candidates(schedule, stages, batch, virtual_stages)
    fewest, *others = [o for o in options if o.micro_batches in valid]
    margins = {
        o.micro_batches: margin(
            curve, schedule, stages, batch, o.micro_batches, fewest.micro_batches, virtual_stages
        )
        for o in others
    }
    winners = [o for o in others if margins[o.micro_batches].beyond_noise]
    best = max(
        winners, key=lambda o: (margins[o.micro_batches].shorter, -o.micro_batches), default=fewest
    )
    closest = max(margins.values(), key=lambda g: (g.shorter, -g.micro_batches), default=None)
    unsettled = {m for m, g in margins.items() if g.rounds > 1 and 0 < g.shorter <= g.noise}
    for o in winners:
        if o is not best:
            close = margin(
                curve, schedule, stages, batch, o.micro_batches, best.micro_batches, virtual_stages
            )
            if close.rounds > 1 and abs(close.shorter) <= close.noise:
                unsettled.add(o.micro_batches)
    if unsettled:
        unsettled |= {fewest.micro_batches, best.micro_batches}
    shown = margins.get(best.micro_batches, closest)
    used = best if auto else next(o for o in options if o.micro_batches == given)
    reason = _reason(schedule, best, fewest, shown, options, margins)
    if not auto:
        reason = f"M={used.micro_batches} as given; auto would choose {reason}"
    return Choice(
        used.micro_batches,
        auto,
        best.micro_batches,
        options,
        reason,
        fewest.micro_batches,
        shown,
        tuple(sorted(unsettled)),
    )


def auto_note(choice: Mapping[str, Any]) -> str:
    """ "auto, 38% ± 4% under M=1" (a row's `extra["microbatch_choice"]` in a few words), "auto,
    none beyond noise of M=1" when it kept the fewest; "" for a given M or nothing to choose."""
    shown = choice.get("margin")
    if not choice.get("auto") or not shown:
        return ""
    against = choice.get("against", 1)
    if choice["micro_batches"] == against:
        return f"auto, none beyond noise of M={against}"
    spread = f" ± {_percent(shown['noise'])}" if shown["rounds"] > 1 else ""
    return f"auto, {_percent(shown['shorter'])}{spread} under M={against}"


def _reason(
    schedule: str,
    best: Option,
    fewest: Option,
    shown: Margin | None,
    options: tuple[Option, ...],
    margins: Mapping[int, Margin],
) -> str:
    """ "M=4: step on the curve 31.2 ms, 38% ± 4% shorter than M=1's 50.3 ms over 5 paired
    rounds (medians); bubble 0.43, ...; M=8 would be 0.27 and 2.1× (35.0 ms)"."""
    head = f"M={best.micro_batches}: step on the curve {best.step_s * 1e3:.3g} ms"
    if shown is not None and best is not fewest:
        # The paired rounds' medians, the figures the share is taken from: the fastest rounds
        # of two sizes come from different moments and may say otherwise.
        head = (
            f"M={best.micro_batches}: step on the curve {shown.step_s * 1e3:.3g} ms, "
            f"{shown.text()} than M={fewest.micro_batches}'s {shown.against_s * 1e3:.3g} ms"
            f"{shown.over()} (medians)"
        )
    elif shown is not None and shown.shorter > 0:
        head += (
            f", the fewest micro-batches: M={shown.micro_batches}'s {shown.text()} is within "
            f"noise{shown.over()}"
        )
    head += (
        f"; bubble {best.bubble:.2f}, per-sample cost {best.per_sample_ratio:.2g}× the whole "
        "batch's"
    )
    if len(options) == 1:
        return f"{head}; schedule '{schedule}' runs one micro-batch"
    ms = [o.micro_batches for o in options]
    at = ms.index(best.micro_batches)
    other = options[at + 1] if at + 1 < len(options) else options[at - 1]
    return (
        f"{head}; M={other.micro_batches} would be {other.bubble:.2f} and "
        f"{other.per_sample_ratio:.2g}× ({_step_quoted(other, fewest, margins) * 1e3:.3g} ms)"
    )


def _step_quoted(option: Option, fewest: Option, margins: Mapping[int, Margin]) -> float:
    """An M's step as the reason quotes it: its median over the rounds paired with the fewest
    micro-batches where the curve kept rounds, so every figure in one sentence is alike."""
    paired = margins.get(option.micro_batches)
    if paired is not None and paired.rounds:
        return paired.step_s
    anyone = next(iter(margins.values()), None)
    return anyone.against_s if option is fewest and anyone and anyone.rounds else option.step_s


def _percent(share: float) -> str:
    """ "38%", "0.4%": two figures at most, never "0%" for a share that is not nil."""
    return f"{share:.0%}" if abs(share) >= 0.095 or share == 0 else f"{share:.1%}"


__all__ = [
    "AUTO",
    "Choice",
    "Curve",
    "CurvePoint",
    "Margin",
    "Option",
    "auto_note",
    "candidates",
    "check_micro_batches",
    "choose",
    "is_auto",
    "margin",
    "simulated_step",
    "sizes",
    "weigh",
]
