"""A run's timings in the Trace Event Format, which ui.perfetto.dev and chrome://tracing open.

One JSON object whose `traceEvents` holds complete events (`"ph": "X"`, times in microseconds)
and metadata events (`"ph": "M"`) naming processes and tracks. The viewer stacks one track's
events, so they must nest or be disjoint: each kind of work gets a track of its own. A pipeline
run gives the measured tasks and cut copies per device (process 1) and the simulated step
(process 2); any other run its steps, then the communication measured after training as its own
block. Pure: a finished `RunResult` in, a dict out. See `docs/strategies/pipeline.md`, "Timelines
in a trace viewer".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...errors import GpkError

MEASURED, SIMULATED = 1, 2
STEPS_TRACK = 0
COPY_TRACKS = 1000  # + device: the copies across a cut into a device's tasks
COMM_TRACK = 2000


def trace_events(result: Any) -> dict[str, Any]:
    """The Trace Event Format object of a finished run (see the module)."""
    if not result.ok or not (result.step_times_s or result.extra.get("timeline")):
        raise GpkError(
            f"run {result.run_id} has no step timings (status {result.status}); save the trace "
            "of a finished run"
        )
    label = f"{result.strategy} ×{result.devices}"
    if result.extra.get("timeline"):
        events = _pipeline(result.extra, label)
    else:
        events = _steps(result, label)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"run_id": result.run_id, "strategy": result.strategy, "kit": "gpk"},
    }


def save_trace(result: Any, path: str) -> str:
    """Write `trace_events(result)` as JSON to `path`; returns the path."""
    with open(path, "w", encoding="utf-8") as file:
        json.dump(trace_events(result), file, allow_nan=False)
    return path


def _pipeline(extra: Mapping[str, Any], label: str) -> list[dict[str, Any]]:
    tasks = extra["timeline"]
    devices = sorted({t["device"] for t in tasks})
    events = [_process(MEASURED, f"{label}: measured"), _track(MEASURED, STEPS_TRACK, "steps")]
    for d in devices:
        events += [
            _track(MEASURED, 1 + d, f"device {d}"),
            _track(MEASURED, COPY_TRACKS + d, f"device {d}: copies across the cut"),
        ]
    offset = 0.0
    for step in sorted({t["step"] for t in tasks}):
        in_step = [t for t in tasks if t["step"] == step]
        span = max(t["end"] for t in in_step)
        events.append(_complete(f"step {step}", "step", offset, span, MEASURED, STEPS_TRACK))
        for t in in_step:
            events.append(_task(t, offset, MEASURED))
            copy = t.get("transfer_s") or 0.0
            if copy > 0:
                events.append(
                    _complete(
                        f"copy into {t['kind']} {t['micro_batch']}",
                        "communication",
                        offset + t["start"],
                        copy,
                        MEASURED,
                        COPY_TRACKS + t["device"],
                    )
                )
        offset += span
    simulated = extra.get("simulated_timeline") or []
    if simulated:
        events.append(_process(SIMULATED, f"{label}: simulated, task times replayed on devices"))
        for d in sorted({t["device"] for t in simulated}):
            events.append(_track(SIMULATED, 1 + d, f"device {d}"))
        events += [_task(t, 0.0, SIMULATED) for t in simulated]
    return events


def _steps(result: Any, label: str) -> list[dict[str, Any]]:
    on = "one device" if result.devices == 1 else f"all {result.devices} devices"
    events = [
        _process(MEASURED, f"{label}: measured"),
        _track(MEASURED, STEPS_TRACK, f"steps ({on}, warm-up left out)"),
    ]
    offset = 0.0
    for index, seconds in enumerate(result.step_times_s):
        events.append(_complete(f"step {index}", "step", offset, seconds, MEASURED, STEPS_TRACK))
        offset += seconds
    extra = result.extra
    blocks = [
        (name, seconds)
        for name, seconds in (
            ("all-reduce alone", extra.get("standalone_all_reduce_s")),
            ("collectives alone", extra.get("standalone_collectives_s")),
            ("all-to-alls alone", extra.get("standalone_all_to_all_s")),  # dispatched experts
            ("exposed per step (with minus without it)", result.comm_time_s),
        )
        if seconds
    ]
    if blocks:
        events.append(
            _track(MEASURED, COMM_TRACK, "communication, measured after training on its own")
        )
        for name, seconds in blocks:
            events.append(
                _complete(
                    f"{name} (measured after training)",
                    "communication",
                    offset,
                    seconds,
                    MEASURED,
                    COMM_TRACK,
                )
            )
            offset += seconds
    return events


def _task(task: Mapping[str, Any], offset: float, pid: int) -> dict[str, Any]:
    kind = task["kind"]
    return _complete(
        f"{kind} mb{task['micro_batch']} stage {task['stage']}",
        kind,
        offset + task["start"],
        task["end"] - task["start"],
        pid,
        1 + task["device"],
        {"stage": task["stage"], "micro_batch": task["micro_batch"]},
    )


def _complete(
    name: str,
    category: str,
    start_s: float,
    seconds: float,
    pid: int,
    tid: int,
    args: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    # Whole nanoseconds for both ends, so a task that ends with its step ends exactly there.
    start, end = round(start_s * 1e9), round((start_s + max(seconds, 0.0)) * 1e9)
    return {
        "name": name,
        "cat": category,
        "ph": "X",
        "ts": start / 1e3,
        "dur": (end - start) / 1e3,
        "pid": pid,
        "tid": tid,
        "args": dict(args or {}),
    }


def _process(pid: int, name: str) -> dict[str, Any]:
    return {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}


def _track(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
