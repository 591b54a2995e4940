"""`RunResult.save_trace`: files checked against the Trace Event Format's own rules."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.results.run_result import RunResult

PHASES_USED = {"X", "M"}
METADATA_NAMES = {
    "process_name",
    "process_labels",
    "process_sort_index",
    "thread_name",
    "thread_sort_index",
}


def validate(trace: object) -> list[dict]:
    """The rules of Google's "Trace Event Format" document that a viewer relies on, for the
    events the kit writes; returns the complete events. JSON Object Format: an object whose
    `traceEvents` is a list of events; `displayTimeUnit` is "ms" or "ns". Every event has a
    string `ph`, integer `pid` and `tid`. A complete event ("X") has a string `name` and `cat`,
    a number `ts` (microseconds) and `dur` (0 or more), and `args`, an object. A metadata event
    ("M") is one of the five names, with args {"name": text} or {"sort_index": int}. Complete
    events on one thread must nest: two that overlap share a start-to-end containment."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    complete = []
    for event in trace["traceEvents"]:
        assert event["ph"] in PHASES_USED, event
        assert all(
            isinstance(event[k], int) and not isinstance(event[k], bool) for k in ("pid", "tid")
        )
        if event["ph"] == "M":
            assert event["name"] in METADATA_NAMES, event
            assert isinstance(
                event["args"].get("name", event["args"].get("sort_index")), (str, int)
            )
            continue
        assert isinstance(event["name"], str) and event["name"]
        assert isinstance(event["cat"], str) and isinstance(event["args"], dict)
        for key in ("ts", "dur"):
            assert isinstance(event[key], int | float) and math.isfinite(event[key]), event
        assert event["ts"] >= 0 and event["dur"] >= 0, event
        complete.append(event)
    by_thread = defaultdict(list)
    for event in complete:  # whole nanoseconds: the file's own precision
        start = round(event["ts"] * 1000)
        by_thread[(event["pid"], event["tid"])].append((start, start + round(event["dur"] * 1000)))
    for (pid, tid), spans in by_thread.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[int] = []
        for start, end in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], f"overlap on {pid}/{tid} at {start}"
            open_ends.append(end)
    return complete


def pipeline_row() -> RunResult:
    def task(step, device, kind, mb, start, end, copy=0.0):
        return {
            "step": step,
            "device": device,
            "stage": device,
            "micro_batch": mb,
            "kind": kind,
            "start": start,
            "end": end,
            "transfer_s": copy,
        }

    timeline = []
    for step in (0, 1):
        timeline += [
            task(step, 0, "forward", 0, 0.0, 0.010),
            task(step, 1, "forward", 0, 0.010, 0.020, copy=0.001),
            task(step, 1, "backward", 0, 0.020, 0.040),
            task(step, 0, "backward", 0, 0.040, 0.060, copy=0.002),
        ]
    simulated = [
        {k: v for k, v in t.items() if k not in ("step", "transfer_s")} for t in timeline[:4]
    ]
    return RunResult(
        run_id="p1",
        experiment_id="e",
        strategy="pipeline",
        devices=2,
        virtual=True,
        status="ok",
        step_times_s=(0.07, 0.06),
        extra={"timeline": timeline, "simulated_timeline": simulated},
    )


def test_a_pipeline_trace_has_a_track_per_device_and_copies_on_their_own(tmp_path):
    path = pipeline_row().save_trace(str(tmp_path / "run.json"))
    trace = json.loads(Path(path).read_text())
    events = validate(trace)
    tasks = [e for e in events if e["cat"] in ("forward", "backward") and e["pid"] == 1]
    assert len(tasks) == 8 and {e["tid"] for e in tasks} == {1, 2}
    # The second timed step follows the first, at its full span of 60 ms.
    assert min(e["ts"] for e in tasks if e["name"].startswith("forward")) == 0.0
    assert sorted(e["ts"] for e in tasks if e["name"] == "forward mb0 stage 0") == [0.0, 60000.0]
    copies = [e for e in events if e["cat"] == "communication"]
    assert [(e["tid"], e["dur"]) for e in copies[:2]] == [(1001, 1000.0), (1000, 2000.0)]
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert "device 0: copies across the cut" in names
    assert any(n.endswith("simulated, task times replayed on devices") for n in names)


SINGLE = RunResult(
    run_id="s1",
    experiment_id="e",
    strategy="single",
    devices=1,
    virtual=False,
    status="ok",
    step_times_s=(0.01, 0.012),
)


def test_a_single_device_run_without_a_timeline_writes_its_steps(tmp_path):
    row = SINGLE
    path = row.save_trace(str(tmp_path / "single.json"))
    assert path == str(tmp_path / "single.json")
    trace = json.loads(Path(path).read_text())
    events = validate(trace)
    assert [(e["name"], e["dur"]) for e in events] == [("step 0", 10000.0), ("step 1", 12000.0)]
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"]
    assert names == ["single ×1: measured", "steps (one device, warm-up left out)"]


def test_a_data_parallel_trace_puts_communication_after_the_steps(tmp_path):
    row = RunResult(
        run_id="d1",
        experiment_id="e",
        strategy="data",
        devices=2,
        virtual=True,
        status="ok",
        step_times_s=(0.02, 0.03, 0.025),
        comm_time_s=0.004,
        extra={"standalone_all_reduce_s": 0.006},
    )
    trace = json.loads(Path(row.save_trace(str(tmp_path / "run.json"))).read_text())
    events = validate(trace)
    steps = [e for e in events if e["cat"] == "step"]
    comm = [e for e in events if e["cat"] == "communication"]
    assert [e["dur"] for e in steps] == [20000.0, 30000.0, 25000.0]
    last_end = steps[-1]["ts"] + steps[-1]["dur"]
    assert comm and all(e["ts"] >= last_end for e in comm)
    assert {e["tid"] for e in comm}.isdisjoint({e["tid"] for e in steps})
    assert all("measured after training" in e["name"] for e in comm)
    assert [e["dur"] for e in comm] == [6000.0, 4000.0]


def test_dispatched_experts_all_to_alls_are_on_the_communication_track(tmp_path):
    dispatched = {"standalone_all_to_all_s": 0.002, "experts": {"kind": "dispatched"}}
    row = dataclasses.replace(
        SINGLE, run_id="x1", strategy="expert", devices=4, virtual=True, extra=dispatched
    )
    trace = json.loads(Path(row.save_trace(str(tmp_path / "run.json"))).read_text())
    (comm,) = [e for e in validate(trace) if e["cat"] == "communication"]
    assert comm["name"].startswith("all-to-alls alone") and comm["dur"] == 2000.0


def test_the_validator_refuses_what_a_viewer_would_mangle():
    good = {
        "name": "a",
        "cat": "c",
        "ph": "X",
        "ts": 0.0,
        "dur": 10.0,
        "pid": 1,
        "tid": 1,
        "args": {},
    }
    validate({"traceEvents": [good]})
    for broken in (
        {**good, "dur": -1.0},
        {**good, "ph": "Q"},
        {**good, "ts": float("nan")},
        {**good, "tid": "one"},
    ):
        with pytest.raises(AssertionError):
            validate({"traceEvents": [broken]})
    with pytest.raises(AssertionError, match="overlap"):
        validate({"traceEvents": [good, {**good, "ts": 5.0}]})


def test_a_failed_run_has_no_trace(tmp_path):
    row = RunResult(
        run_id="f",
        experiment_id="e",
        strategy="data",
        devices=2,
        virtual=True,
        status="failed",
        reason="boom",
    )
    with pytest.raises(GpkError, match="run f has no step timings \\(status failed\\)"):
        row.save_trace(str(tmp_path / "x.json"))
