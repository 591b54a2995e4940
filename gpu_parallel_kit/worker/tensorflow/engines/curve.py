"""The micro-batch efficiency curve, measured: each stage's tasks timed alone at each size.

One micro-batch of each size goes through the stages one task at a time, so a task's time is
its own and not shared with the other devices' threads on the same cores. A first pass per size
traces and is not kept; then rounds go over every size (2 to 5 within about a second), each
task's fastest time the curve's point. Sizes whose M's are within noise are timed again once.
The measurement applies no update and puts back the state the forwards move, so training
afterwards is the same as without it. What the curve means is `pipeline/microbatch.py`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf

from ....pipeline.microbatch import Choice, Curve
from ....runs.description.run_spec import RunSpec
from ...pipeline.microbatch_choice import curve_and_choice as choose_from_curve
from ...pipeline.microbatch_choice import curve_of
from ...pipeline.microbatch_choice import serial_curve as serial_curve
from .stage_runner import _nbytes, _wait_for
from .stages import Stage

ROUNDS = (2, 5)  # timed rounds over every size: at least, at most
BUDGET_S = 1.0  # no further round once the timed rounds took this long


def curve_and_choice(
    spec: RunSpec,
    stages: list[Stage],
    tasks: list[Any],
    feed: Callable[[Any], dict[str, tf.Tensor]],
    x: Any,
    y: Any,
) -> tuple[Curve | None, Choice | None]:
    """The curve and the M chosen from it (`worker/pipeline/microbatch_choice.py`), each
    stage's `tasks` timed alone here."""
    split = any(task.split for task in tasks)

    def measure(sizes: list[int], earlier: Curve | None) -> Curve:
        return measure_curve(stages, tasks, feed, x, y, sizes, split, earlier)

    return choose_from_curve(spec, measure)


def measure_curve(
    stages: list[Stage],
    tasks: list[Any],
    feed: Callable[[Any], dict[str, tf.Tensor]],
    x: Any,
    y: Any,
    sizes: Iterable[int],
    split: bool,
    earlier: Curve | None = None,
) -> Curve:
    """Every stage's F and B (and W when `split`) at each size in `sizes` (samples taken from
    the front of the batch `x`, `y`), copies across a cut timed apart. `tasks` are the stages'
    own (`pipeline.stage_tasks`): traced here for a size that varies, training reuses them.
    With an `earlier` curve, its sizes are traced already: the rounds are added to its own."""
    clock = time.perf_counter()
    saved = [[v.numpy() for v in s.model.variables] for s in stages]
    last = len(stages) - 1
    samples: dict[tuple[int, str, int], list[float]] = {}
    copies = [0.0, 0.0]  # seconds, bytes
    crossing: dict[int, float] = {}
    batches = {size: (feed(_front(x, size)), _front(y, size)) for size in sizes}
    traced = time.perf_counter()
    try:
        # The first size traces what training needs anyway; the second, a trace for any size.
        for index, (xs, ys) in enumerate(list(batches.values())[: 0 if earlier else 2]):
            _one_pass(stages, tasks, xs, ys, split)
            if not index:
                traced = time.perf_counter() - traced
        # Round robin over the sizes: a burst of load from elsewhere touches every size alike.
        timing = time.perf_counter()
        for round_ in range(ROUNDS[1]):
            if round_ >= ROUNDS[0] and time.perf_counter() - timing > BUDGET_S:
                break
            for size, (xs, ys) in batches.items():
                timed, copied, moved = _one_pass(stages, tasks, xs, ys, split)
                for (stage, kind), seconds in timed.items():
                    samples.setdefault((stage, kind, size), []).append(seconds)
                copies[0] += sum(c for c, _ in copied)
                copies[1] += sum(b for _, b in copied)
                for cut, nbytes in moved.items():
                    crossing[cut] = max(crossing.get(cut, 0.0), nbytes / size)
    finally:
        for stage, values in zip(stages, saved, strict=True):
            for variable, value in zip(stage.model.variables, values, strict=True):
                variable.assign(value)
    if earlier is not None:
        return earlier.with_rounds(samples, time.perf_counter() - clock)
    # Tracing at the first size is what training would pay anyway: it is not the curve's.
    cost_s = time.perf_counter() - clock - traced
    return curve_of(samples, crossing, last, copies, cost_s)


def _one_pass(
    stages: list[Stage], tasks: list[Any], xs: dict[str, tf.Tensor], ys: Any, split: bool
) -> tuple[dict[tuple[int, str], float], list[tuple[float, int]], dict[int, int]]:
    """(each task's time without its copy, each copy's (seconds, bytes), activation bytes into
    each cut) of one micro-batch sent down the stages and back."""
    timed: dict[tuple[int, str], float] = {}
    copied: list[tuple[float, int]] = []
    moved: dict[int, int] = {}
    kept, later = {}, {}
    values: dict[str, tf.Tensor] = xs
    for stage, task in zip(stages, tasks, strict=True):
        with tf.device(stage.device):
            task.begin_step()
            start = time.perf_counter()
            received = {name: tf.identity(value) for name, value in values.items()}
            copy = time.perf_counter() - start
            values, kept[stage.index] = task.forward(received, ys)
            if stage.index < len(stages) - 1:  # the last stage's loss is a scalar, read below
                _wait_for(values)
            timed[(stage.index, "F")] = time.perf_counter() - start - copy
        if stage.index:
            copied.append((copy, _nbytes(received)))
            moved[stage.index - 1] = _nbytes(received)
    upstream: dict[str, tf.Tensor] = {}
    for stage, task in reversed(list(zip(stages, tasks, strict=True))):
        with tf.device(stage.device):
            start = time.perf_counter()
            incoming = {name: tf.identity(value) for name, value in upstream.items()}
            copy = time.perf_counter() - start
            upstream, later[stage.index] = task.backward(kept.pop(stage.index), incoming, ys)
            _wait_for(upstream)
            timed[(stage.index, "B")] = time.perf_counter() - start - copy
        if incoming:
            copied.append((copy, _nbytes(incoming)))
    if split:
        for stage, task in zip(stages, tasks, strict=True):
            with tf.device(stage.device):
                start = time.perf_counter()
                task.weight(later[stage.index])
                timed[(stage.index, "W")] = time.perf_counter() - start
    return timed, copied, moved


def _front(batch: Any, size: int) -> Any:
    """The first `size` samples of a batch (a tensor, or a tuple or dict of them)."""
    return tf.nest.map_structure(lambda tensor: tensor[:size], batch)
