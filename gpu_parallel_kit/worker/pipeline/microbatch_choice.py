"""Choosing M in the worker, whatever its backend: which sizes to time, the choice from the
measured curve (timed again where two M's are within noise), and the whole-batch curve of a run
of one micro-batch, from the passes its simulated view times anyway.

The timing itself is each backend's (`worker/pipeline/measured_curve.py`,
`worker/pipeline/measured_curve.py`); what the curve and the choice mean is
`pipeline/microbatch.py`'s. No TensorFlow or JAX is imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...pipeline.microbatch import Choice, Curve, CurvePoint, candidates, choose, is_auto, sizes
from ...pipeline.tasks import Pass

# (the sizes to time, largest first; the curve those rounds add to, or None) -> the curve
MeasureCurve = Callable[[list[int], Curve | None], Curve]


def curve_and_choice(spec: Any, measure: MeasureCurve) -> tuple[Curve | None, Choice | None]:
    """The curve at the sizes the run's schedule could use (and the user's own M's size), and
    the M whose simulated step is shortest, or the user's M with what auto would pick. None for
    both when there is nothing to choose (naive, M=1): the curve's one point, each task at the
    whole batch, is then `serial_curve`'s, from the passes the simulated view times anyway."""
    k, chunks, batch = pipeline_stages(spec), spec.virtual_stages, spec.global_batch
    given = spec.micro_batches
    if (spec.options.get("mesh") or (1, 1))[0] > 1:
        # Smaller micro-batches would not split over the stages' data axis: M is the user's.
        return None, None
    if candidates(spec.schedule, k, batch, chunks) == (1,) and (
        is_auto(given) or given in (None, 1)
    ):
        return None, None
    wanted = set(sizes(spec.schedule, k, batch, chunks))
    if not is_auto(spec.micro_batches):
        wanted.add(batch // (spec.micro_batches or 1))
    curve = measure(sorted(wanted, reverse=True), None)
    given = 1 if given is None else given
    choice = choose(curve, spec.schedule, k, batch, chunks, given=given)
    if choice.measure_again:  # M's within noise of each other: more rounds of theirs alone
        again = sorted({batch // m for m in choice.measure_again}, reverse=True)
        curve = measure(again, curve)
        choice = choose(curve, spec.schedule, k, batch, chunks, given=given)
    return curve, choice


def serial_curve(spec: Any, alone: Sequence[Any], cut_bytes: list[int]) -> tuple[Curve, Choice]:
    """The whole-batch curve of a one-micro-batch run from its serial passes (step reports
    whose tasks ran one at a time), copies across a cut apart, and its trivial choice."""
    samples: dict[tuple[int, Pass], list[float]] = {}
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
    k, chunks = pipeline_stages(spec), spec.virtual_stages
    given = 1 if spec.micro_batches is None else spec.micro_batches
    return curve, choose(curve, spec.schedule, k, batch, chunks, given=given)


def pipeline_stages(spec: Any) -> int:
    """K: the run's stages (devices ÷ the devices of a stage's mesh), one per device by default."""
    return spec.options.get("stages") or spec.devices.count


def curve_of(
    samples: dict[tuple[int, str, int], list[float]],
    crossing: dict[int, float],
    cuts: int,
    copies: Sequence[float],
    cost_s: float,
) -> Curve:
    """The curve from each (stage, kind, size)'s timed passes, each cut's bytes per sample, the
    copies' (seconds, bytes) summed, and what timing them cost."""
    # The fastest pass: other work on the same cores only ever adds time to a task.
    points = tuple(
        CurvePoint(stage, kind, size, min(values), tuple(values))
        for (stage, kind, size), values in sorted(samples.items())
    )
    seconds, moved = copies
    per_byte = seconds / moved if moved else 0.0
    return Curve(points, tuple(crossing.get(c, 0.0) for c in range(cuts)), per_byte, cost_s)


def curve_fields(
    spec: Any,
    curve: Curve | None,
    choice: Choice | None,
    alone: Sequence[Any],
    cut_bytes: list[int],
) -> dict[str, Any]:
    """A pipeline row's curve and choice: the curve M was chosen from, else, for a run of one
    micro-batch, the whole-batch curve of its serial passes (`alone`); none without either."""
    if curve is None and alone:
        curve, choice = serial_curve(spec, alone, cut_bytes)
    if curve is None or choice is None:
        return {}
    return {"microbatch_curve": curve.to_dict(), "microbatch_choice": choice.to_dict()}
