"""The micro-batch efficiency curve, measured: each stage's passes timed alone at each size.

One micro-batch of each size goes down the stages and back one pass at a time, each waited for,
so a pass's time is its own and not shared with the other devices' threads on the same cores. A
first pass at the first two sizes traces or compiles (training at the chosen size reuses those
calls: M is an argument of the passes, not a constant in them) and is not kept; then rounds go
over every size (2 to 5 within about a second), each pass's fastest time the curve's point.
Sizes whose M's are within noise are timed again once. The measurement applies no update and
puts back the state the forwards move, so training afterwards is the same as without it. The
stages are the runner's (`schedule_runner.PipelineStage`), on either backend; what the curve
means is `pipeline/microbatch.py`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from ...pipeline.microbatch import Choice, Curve
from ...pipeline.tasks import Pass
from .microbatch_choice import curve_and_choice as choose_from_curve
from .microbatch_choice import curve_of
from .stage_protocol import PipelineStage

ROUNDS = (2, 5)  # timed rounds over every size: at least, at most
BUDGET_S = 1.0  # no further round once the timed rounds took this long

Front = Callable[[Any, int], Any]  # (a batch, a size) -> its first `size` samples


def curve_and_choice(
    spec: Any,
    stages: list[PipelineStage],
    feed: Callable[[Any], dict[str, Any]],
    front: Front,
    x: Any,
    y: Any,
    split: bool,
) -> tuple[Curve | None, Choice | None]:
    """The curve and the M chosen from it (`microbatch_choice.py`), timed here on the first
    global batch `x`, `y`; `split` when the schedule has weight passes."""

    def measure(sizes: list[int], earlier: Curve | None) -> Curve:
        return measure_curve(stages, feed, front, x, y, sizes, split, earlier)

    return choose_from_curve(spec, measure)


def measure_curve(
    stages: list[PipelineStage],
    feed: Callable[[Any], dict[str, Any]],
    front: Front,
    x: Any,
    y: Any,
    sizes: Iterable[int],
    split: bool,
    earlier: Curve | None = None,
) -> Curve:
    """Every stage's F and B (and W when `split`) at each size in `sizes` (samples from the
    front of the batch), copies across a cut timed apart. With an `earlier` curve its sizes are
    traced already: the rounds are added to its own."""
    clock = time.perf_counter()
    kept = [stage.snapshot() for stage in stages]
    samples: dict[tuple[int, str, int], list[float]] = {}
    copies = [0.0, 0.0]  # seconds, bytes
    crossing: dict[int, float] = {}
    batches = {size: (feed(front(x, size)), front(y, size)) for size in sizes}
    traced = time.perf_counter()
    try:
        # The first size traces what training needs anyway; the second, a trace for any size.
        for index, (xs, ys) in enumerate(list(batches.values())[: 0 if earlier else 2]):
            _one_pass(stages, xs, ys, split)
            if not index:
                traced = time.perf_counter() - traced
        # Round robin over the sizes: a burst of load from elsewhere touches every size alike.
        timing = time.perf_counter()
        for round_ in range(ROUNDS[1]):
            if round_ >= ROUNDS[0] and time.perf_counter() - timing > BUDGET_S:
                break
            for size, (xs, ys) in batches.items():
                timed, copied, moved = _one_pass(stages, xs, ys, split)
                for (stage, kind), seconds in timed.items():
                    samples.setdefault((stage, kind, size), []).append(seconds)
                copies[0] += sum(c for c, _ in copied)
                copies[1] += sum(b for _, b in copied)
                for cut, moved_bytes in moved.items():
                    crossing[cut] = max(crossing.get(cut, 0.0), moved_bytes / size)
    finally:
        for stage, state in zip(stages, kept, strict=True):
            stage.restore(state)
    if earlier is not None:
        return earlier.with_rounds(samples, time.perf_counter() - clock)
    # Tracing at the first size is what training would pay anyway: it is not the curve's.
    cost_s = time.perf_counter() - clock - traced
    return curve_of(samples, crossing, len(stages) - 1, copies, cost_s)


def _one_pass(
    stages: list[PipelineStage], xs: dict[str, Any], ys: Any, split: bool
) -> tuple[dict[tuple[int, Pass], float], list[tuple[float, int]], dict[int, int]]:
    """(each pass's time without its copy, each copy's (seconds, bytes), activation bytes into
    each cut) of one micro-batch sent down the stages and back."""
    timed: dict[tuple[int, Pass], float] = {}
    copied: list[tuple[float, int]] = []
    moved: dict[int, int] = {}
    saved, later = {}, {}
    values = xs
    for stage in stages:
        stage.begin_step()
        start = time.perf_counter()
        received = stage.put(values)
        target = stage.labels(ys)
        stage.wait(received)
        copy = time.perf_counter() - start
        forwarded = stage.forward(received, target)
        values, objective, saved[stage.index] = forwarded.sent, forwarded.objective, forwarded.saved
        stage.wait((values, objective))
        timed[(stage.index, Pass.FORWARD)] = time.perf_counter() - start - copy
        if stage.index:
            copied.append((copy, stage.nbytes(received)))
            moved[stage.index - 1] = stage.nbytes(received)
    upstream: dict[str, Any] = {}
    part = Pass.INPUT_BACKWARD if split else Pass.BACKWARD
    for stage in reversed(stages):
        start = time.perf_counter()
        incoming = stage.put(upstream)
        stage.wait(incoming)
        copy = time.perf_counter() - start
        backwarded = stage.backward(saved.pop(stage.index), incoming, ys, part)
        upstream, later[stage.index] = backwarded.sent, backwarded.for_weight
        stage.wait((upstream, stage.gradients()))
        timed[(stage.index, part)] = time.perf_counter() - start - copy
        if incoming:
            copied.append((copy, stage.nbytes(incoming)))
    if split:
        for stage in stages:
            start = time.perf_counter()
            stage.weight_backward(later[stage.index])
            stage.wait(stage.gradients())
            timed[(stage.index, Pass.WEIGHT_BACKWARD)] = time.perf_counter() - start
    return timed, copied, moved
