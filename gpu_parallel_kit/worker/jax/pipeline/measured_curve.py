"""The micro-batch curve measured on JAX: each stage's compiled passes timed alone at each size.

One micro-batch of each size goes down the stages and back one pass at a time, each waited for,
so a pass's time is its own. A first pass at the first two sizes compiles (training at the
chosen size reuses those programs: M is an argument of the passes, not a constant in them) and
is not kept; then rounds go over every size, each pass's fastest time the curve's point, as
on TensorFlow (`worker/tensorflow/engines/curve.py`). No update is applied and the statistics
the forwards move are put back, so training afterwards is the same as without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax

from ....pipeline.microbatch import Curve
from ...pipeline.microbatch_choice import curve_and_choice, curve_of
from .schedule_runner import nbytes
from .stage_functions import StageFunctions

ROUNDS = (2, 5)  # timed rounds over every size: at least, at most
BUDGET_S = 1.0  # no further round once the timed rounds took this long


def choose_micro_batches(
    spec: Any,
    stages: list[StageFunctions],
    feed: Callable[[Any], dict[str, Any]],
    x: Any,
    y: Any,
    split: bool,
):
    """The curve and the M chosen from it (`worker/pipeline/microbatch_choice.py`), timed here
    on the first global batch `x`, `y`."""

    def measure(sizes: list[int], earlier: Curve | None) -> Curve:
        return measure_curve(stages, feed, x, y, sizes, split, earlier)

    return curve_and_choice(spec, measure)


def measure_curve(
    stages: list[StageFunctions],
    feed: Callable[[Any], dict[str, Any]],
    x: Any,
    y: Any,
    sizes: list[int],
    split: bool,
    earlier: Curve | None = None,
) -> Curve:
    """Every stage's F and B (and W when `split`) at each size in `sizes` (samples from the
    front of the batch), copies across a cut timed apart. With an `earlier` curve its sizes are
    compiled already: the rounds are added to its own."""
    clock = time.perf_counter()
    kept = [(s.non_trainable, s.accumulated) for s in stages]
    samples: dict[tuple[int, str, int], list[float]] = {}
    copies = [0.0, 0.0]  # seconds, bytes
    crossing: dict[int, float] = {}
    batches = {size: (feed(_front(x, size)), _front(y, size)) for size in sizes}
    compiled = time.perf_counter()
    try:
        for index, (xs, ys) in enumerate(list(batches.values())[: 0 if earlier else 2]):
            _one_pass(stages, xs, ys, split)
            if not index:
                compiled = time.perf_counter() - compiled
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
        for stage, (state, accumulated) in zip(stages, kept, strict=True):
            stage.non_trainable, stage.accumulated = state, accumulated
    if earlier is not None:
        return earlier.with_rounds(samples, time.perf_counter() - clock)
    # Compiling at the first size is what training would pay anyway: it is not the curve's.
    cost_s = time.perf_counter() - clock - compiled
    return curve_of(samples, crossing, len(stages) - 1, copies, cost_s)


def _one_pass(stages: list[StageFunctions], xs: dict[str, Any], ys: Any, split: bool):
    """(each pass's time without its copy, each copy's (seconds, bytes), activation bytes into
    each cut) of one micro-batch sent down the stages and back."""
    timed: dict[tuple[int, str], float] = {}
    copied: list[tuple[float, int]] = []
    moved: dict[int, int] = {}
    saved, later = {}, {}
    values = xs
    for stage in stages:
        start = time.perf_counter()
        received = jax.block_until_ready(stage.placement.put_batch(values))
        target = None if stage.loss_fn is None else stage.placement.put_batch(ys)
        copy = time.perf_counter() - start
        values, objective, saved[stage.index] = stage.forward(received, target)
        jax.block_until_ready((values, objective))
        timed[(stage.index, "F")] = time.perf_counter() - start - copy
        if stage.index:
            copied.append((copy, nbytes(received)))
            moved[stage.index - 1] = nbytes(received)
    upstream: dict[str, Any] = {}
    for stage in reversed(stages):
        start = time.perf_counter()
        incoming = jax.block_until_ready(stage.placement.put_batch(upstream))
        copy = time.perf_counter() - start
        upstream, later[stage.index] = stage.backward(
            saved.pop(stage.index), incoming, "B" if split else "BW"
        )
        jax.block_until_ready((upstream, stage.accumulated))
        timed[(stage.index, "B")] = time.perf_counter() - start - copy
        if incoming:
            copied.append((copy, nbytes(incoming)))
    if split:
        for stage in stages:
            start = time.perf_counter()
            stage.backward(*later[stage.index], "W")
            jax.block_until_ready(stage.accumulated)
            timed[(stage.index, "W")] = time.perf_counter() - start
    return timed, copied, moved


def _front(batch: Any, size: int) -> Any:
    """The first `size` samples of a batch (an array, or a tuple or dict of them)."""
    return jax.tree.map(lambda array: array[:size], batch)
