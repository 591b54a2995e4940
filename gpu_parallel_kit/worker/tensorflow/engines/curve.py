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

from ....pipeline.microbatch import Choice, Curve, CurvePoint, candidates, choose, is_auto, sizes
from ....runs.description.run_spec import RunSpec
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
    """The curve at the sizes the run's schedule could use (and the user's own M's size), and
    the M whose simulated step is shortest, or the user's M with what auto would pick. None for
    both when there is nothing to choose (naive, M=1): the curve's one point, each task at the
    whole batch, is then `serial_curve`'s, from the passes the simulated view times anyway."""
    k, chunks, batch = spec.devices.count, spec.virtual_stages, spec.global_batch
    given = spec.micro_batches
    if candidates(spec.schedule, k, batch, chunks) == (1,) and (
        is_auto(given) or given in (None, 1)
    ):
        return None, None
    wanted = set(sizes(spec.schedule, k, batch, chunks))
    if not is_auto(spec.micro_batches):
        wanted.add(batch // (spec.micro_batches or 1))
    split = any(task.split for task in tasks)
    curve = measure_curve(stages, tasks, feed, x, y, sorted(wanted, reverse=True), split)
    given = 1 if given is None else given
    choice = choose(curve, spec.schedule, k, batch, chunks, given=given)
    if choice.measure_again:  # M's within noise of each other: more rounds of theirs alone
        again = sorted({batch // m for m in choice.measure_again}, reverse=True)
        curve = measure_curve(stages, tasks, feed, x, y, again, split, curve)
        choice = choose(curve, spec.schedule, k, batch, chunks, given=given)
    return curve, choice


def serial_curve(spec: RunSpec, alone: list[Any], cut_bytes: list[int]) -> tuple[Curve, Choice]:
    """The whole-batch curve of a one-micro-batch run from its serial passes (`StepReport`s
    whose tasks ran one at a time), copies across a cut apart, and its trivial choice."""
    samples: dict[tuple[int, str], list[float]] = {}
    copies = [0.0, 0.0]
    for report in alone:
        for t in report.tasks:
            samples.setdefault((t.stage, t.kind), []).append(t.end - t.start - t.transfer_s)
            copies[0] += t.transfer_s
            copies[1] += t.bytes_in
    batch = spec.global_batch
    points = tuple(
        CurvePoint(stage, kind, batch, max(0.0, min(values)))
        for (stage, kind), values in sorted(samples.items())
    )
    # A cut's bytes per step are its activations and their gradients: half each way.
    crossing = tuple(b / 2 / batch for b in cut_bytes)
    curve = Curve(points, crossing, copies[0] / copies[1] if copies[1] else 0.0, 0.0)
    k, chunks = spec.devices.count, spec.virtual_stages
    given = 1 if spec.micro_batches is None else spec.micro_batches
    return curve, choose(curve, spec.schedule, k, batch, chunks, given=given)


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
    # The fastest pass: other work on the same cores only ever adds time to a task.
    points = tuple(
        CurvePoint(stage, kind, size, min(values), tuple(values))
        for (stage, kind, size), values in sorted(samples.items())
    )
    return Curve(
        points,
        tuple(crossing.get(c, 0.0) for c in range(last)),
        copies[0] / copies[1] if copies[1] else 0.0,
        # Tracing at the first size is what training would pay anyway: it is not the curve's.
        time.perf_counter() - clock - traced,
    )


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
