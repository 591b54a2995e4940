"""What measured runs tell the cost model: parameter bytes, the backward/forward ratio, and a
pipeline's stage shares and bytes per cut, each with a note saying where it came from."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from ...errors import GpkError
from ...runs.results.run_result import RunResult
from .step_time_model import DEFAULT_BACKWARD_RATIO, Partition


class NotedPartition(NamedTuple):
    """A pipeline's partition, and the sentence saying where its shares and bytes came from."""

    partition: Partition
    note: str


def measured_partition(run: RunResult, k: int, cut_bytes: float | None) -> NotedPartition:
    """Work shares from the run's tasks timed alone, else its busy times; its bytes per cut."""
    stages = sorted(run.extra["stages"], key=lambda s: s["stage"])
    forward, backward = _task_shares(run.extra.get("simulated_timeline") or [], k)
    source = "its tasks timed alone"
    if forward is None or backward is None:
        forward = backward = _shares([s.get("busy_s") or 0.0 for s in stages])
        source = "its busy times"
    if forward is None or backward is None:
        forward = backward = (1.0 / k,) * k
        source = "nothing (equal, assumed)"
    params = _shares([s.get("parameter_bytes") or 0 for s in stages]) or (1.0 / k,) * k
    # A measured cut carries a step's activations and their gradients: halve, per sample.
    cuts = tuple(c / 2 / run.global_batch for c in run.extra.get("cut_bytes") or [])
    sizes = ", ".join(f"{c:.4g}" for c in cuts) or "none"
    if cut_bytes is not None:
        cuts, sizes = (cut_bytes,) * (k - 1), f"{cut_bytes:g} (given)"
    elif len(cuts) != k - 1:
        cuts, sizes = (0.0,) * (k - 1), "not recorded, taken as 0"
    note = f"{k} stages as in {run.run_id}: work shares from {source}; bytes per sample per cut: "
    return NotedPartition(Partition(forward, backward, params, cuts), note + sizes)


def _task_shares(tasks: list[dict[str, Any]], k: int) -> tuple[tuple[float, ...] | None, ...]:
    totals = {"forward": [0.0] * k, "backward": [0.0] * k}
    for t in tasks:
        if t["kind"] in totals and 0 <= t["stage"] < k:
            totals[t["kind"]][t["stage"]] += t["end"] - t["start"]
    return _shares(totals["forward"]), _shares(totals["backward"])


def _shares(values: Sequence[float]) -> tuple[float, ...] | None:
    total = sum(values)
    return tuple(v / total for v in values) if total > 0 else None


def parameter_bytes(baseline: RunResult, runs: list[RunResult]) -> float:
    for run in [baseline, *runs]:
        if run.ok and run.extra.get("parameter_bytes") is not None:
            return float(run.extra["parameter_bytes"])
    raise GpkError(
        f"experiment {baseline.experiment_id} has no run with parameter_bytes in its extra "
        "figures; run it again with this version of the kit"
    )


class NotedFigure(NamedTuple):
    """A figure the cost model uses, and a note saying where it came from."""

    value: float
    note: str  # "given", measured in which run, or assumed


def backward_ratio(given: float | None, models: Sequence[RunResult]) -> NotedFigure:
    """Backward seconds over forward seconds: given, else timed in a pipeline run's tasks,
    else assumed."""
    if given is not None:
        return NotedFigure(given, f"backward = {given:g} × forward (given)")
    for run in models:
        tasks = run.extra.get("simulated_timeline") or []
        forward = sum(t["end"] - t["start"] for t in tasks if t["kind"] == "forward")
        backward = sum(t["end"] - t["start"] for t in tasks if t["kind"] == "backward")
        if forward > 0 and backward > 0:
            ratio = backward / forward
            note = f"backward = {ratio:.3g} × forward (tasks of {run.run_id} timed alone)"
            return NotedFigure(ratio, note)
    return NotedFigure(DEFAULT_BACKWARD_RATIO, "backward = 2 × forward (assumed)")


def sharded_parameter_share(run: RunResult) -> float:
    """The share of a tensor-parallel run's trainable parameter elements its layout sharded."""
    total = sharded = 0
    for placement in run.extra.get("layout", []):
        size = math.prod(placement["shape"]) if placement["shape"] else 1
        total += size
        if "model" in placement["axes"]:
            sharded += size
    return sharded / total if total else 0.0
