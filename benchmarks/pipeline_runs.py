"""The runs of the pipeline schedules' comparison: the deep MLP and its data, the grid of
(schedule, K, M, backend) cases the kit accepts, and one table row per case from its RunResult."""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

import gpu_parallel_kit as gpk

FEATURES = 256
CLASSES = 10
WIDTH = 512  # --width: 512 gives about 2.5 M parameters; 1024 gives a micro-batch more work
HIDDEN_LAYERS = 10  # + the output layer: 11 Dense layers
ENGINES = {"compiled": True, "eager": False}  # recompute= of each engine
SCHEDULES = ("naive", "gpipe", "1f1b")
BACKENDS = ("tensorflow", "jax")


def mlp_builder(width: int):
    """A builder of a chain of Dense layers of `width` units (so the kit can cut it anywhere)."""

    def build_mlp():
        return _mlp(width)

    return build_mlp


def _mlp(width: int):
    """The chain of Dense layers, compiled like keras.io does."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            *[keras.layers.Dense(width, activation="relu") for _ in range(HIDDEN_LAYERS)],
            keras.layers.Dense(CLASSES),
        ],
        name="pipeline_mlp",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def make_data(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, FEATURES), dtype=np.float32)
    y = np.argmax(x[:, :CLASSES], axis=1).astype(np.int32)
    return x, y


@dataclass(frozen=True)
class Case:
    """One model-parallel run of the grid."""

    schedule: str  # naive | gpipe | 1f1b
    stages: int  # K: devices, one stage each
    micro_batches: int  # M
    engine: str = "compiled"  # compiled (recompute) | eager (recompute=False: tape or VJP kept)
    backend: str = "tensorflow"

    def __str__(self) -> str:
        return (
            f"{self.backend} {self.engine} {self.schedule} K={self.stages} M={self.micro_batches}"
        )


@dataclass(frozen=True)
class Row:
    """What the table shows for one case, from its RunResult (None: not measured)."""

    case: Case
    status: str = "ok"
    reason: str = ""
    step_s: float | None = None
    spread_s: float | None = None
    bubble_measured: float | None = None
    bubble_simulated: float | None = None
    bubble_theoretical: float | None = None
    simulated_step_s: float | None = None
    task_span_s: float | None = None  # median over timed steps: first task start to last end
    work_alone_s: float | None = None  # sum of all task times of a serial pass (each alone)
    task_overhead_s: float | None = None  # median per task: its time beyond its call and copies
    task_overhead_alone_s: float | None = None  # the same in the serial passes, each task alone
    outside_s: float | None = None  # median per step: time outside every task
    activation_bytes: list[int] = field(default_factory=list)  # per stage, held at peak
    live: list[int] = field(default_factory=list)  # per stage: micro-batches held at once
    parameter_bytes: list[int] = field(default_factory=list)
    layers: list[int] = field(default_factory=list)  # layers per stage
    stage_tasks: str = ""  # what ran the tasks, in the kit's words

    @classmethod
    def from_result(cls, case: Case, result: gpk.RunResult) -> Row:
        if not result.ok:
            return cls(case, status=result.status, reason=result.reason)
        extra = result.extra
        stages = extra.get("stages", [])
        return cls(
            case,
            step_s=result.step_time_s,
            spread_s=result.step_time_spread_s,
            bubble_measured=extra.get("bubble_fraction"),
            bubble_simulated=extra.get("bubble_simulated"),
            bubble_theoretical=extra.get("bubble_theoretical"),
            simulated_step_s=extra.get("simulated_step_time_s"),
            task_span_s=_task_span(extra.get("timeline", [])),
            work_alone_s=extra.get("work_alone_s"),
            task_overhead_s=extra.get("task_overhead_s"),
            task_overhead_alone_s=extra.get("task_overhead_alone_s"),
            outside_s=extra.get("outside_tasks_s"),
            activation_bytes=[s["activation_bytes_held"] for s in stages],
            live=[s["peak_live_micro_batches"] for s in stages],
            parameter_bytes=[s["parameter_bytes"] for s in stages],
            layers=[len(s["layers"]) for s in stages],
            stage_tasks=extra.get("stage_tasks", ""),
        )

    @property
    def outside_tasks_s(self) -> float | None:
        """Step time not covered by any task: the optimizer updates, splitting, the data."""
        return self.outside_s

    @property
    def peak_activation_bytes(self) -> int | None:
        return max(self.activation_bytes) if self.activation_bytes else None


def _task_span(timeline: Sequence[dict[str, Any]]) -> float | None:
    steps: dict[int, list[dict[str, Any]]] = {}
    for task in timeline:
        steps.setdefault(task["step"], []).append(task)
    spans = [max(t["end"] for t in ts) - min(t["start"] for t in ts) for ts in steps.values()]
    return statistics.median(spans) if spans else None


def plan_cases(
    exp: gpk.Experiment,
    stages: Sequence[int],
    micro_batches: Sequence[int],
    engines: Sequence[str] = ("compiled",),
    backends: Sequence[str] = ("tensorflow",),
) -> tuple[list[Case], list[str]]:
    """Every case the kit accepts, in run order, and one line per case it refused.

    naive runs once per K, with M=1 (the kit refuses it with more micro-batches), as the baseline;
    then gpipe and 1f1b side by side per M, so drift of the machine hits both alike. Each case
    runs on every backend back to back, for the same reason.
    """
    cases, refused = [], []
    for k in dict.fromkeys(stages):
        grid = []
        for engine in engines:
            grid += [Case("naive", k, 1, engine)]
            grid += [
                Case(s, k, m, engine) for m in dict.fromkeys(micro_batches) for s in SCHEDULES[1:]
            ]
        grid = [replace(case, backend=b) for case in grid for b in dict.fromkeys(backends)]
        for case in grid:
            try:
                exp.plan(
                    "model",
                    k,
                    schedule=case.schedule,
                    micro_batches=case.micro_batches,
                    recompute=ENGINES[case.engine],
                    backend=case.backend,
                )
            except gpk.GpkError as error:
                refused.append(f"{case}: {error}")
                continue
            cases.append(case)
    return cases, refused


def run_all(args: argparse.Namespace, folder: pathlib.Path) -> dict[str, Any]:
    x, y = make_data(args.steps * args.batch, seed=args.seed)
    exp = gpk.Experiment(
        model=mlp_builder(args.width),
        data=(x, y),
        batch_size=args.batch,
        epochs=1,
        steps_per_epoch=args.steps,
        seed=args.seed,
        progress=False,
        log=str(folder / "runs.sqlite"),  # keep the caller's own run log clean
    )
    backends = list(dict.fromkeys(args.backend))
    cases, refused = plan_cases(exp, args.stages, args.micro_batches, args.engine, backends)
    for line in refused:
        print(f"skipped (refused by the kit) {line}")
    total = len(cases) + len(backends)
    print(
        f"{total} runs: the single-device baseline on each backend, then {len(cases)} pipelines\n"
    )
    single = {
        backend: _timed_run(exp, "single", 1, f"{backend} single K=1", i, total, backend=backend)
        for i, backend in enumerate(backends)
    }
    rows: list[Row] = []
    raw: list[dict[str, Any]] = []
    for index, case in enumerate(cases, start=len(backends)):
        result = _timed_run(
            exp,
            "model",
            case.stages,
            str(case),
            index,
            total,
            schedule=case.schedule,
            micro_batches=case.micro_batches,
            recompute=ENGINES[case.engine],
            backend=case.backend,
        )
        rows.append(Row.from_result(case, result))
        raw.append(result.to_dict())  # with the timelines: the simulated one has task times
    return {"single": single, "rows": rows, "raw": raw, "refused": refused}


def _timed_run(
    exp: gpk.Experiment, strategy: str, devices: int, label: str, index: int, total: int, **plan
) -> gpk.RunResult:
    began = time.perf_counter()
    result = exp.run(strategy=strategy, devices=devices, **plan)
    took = time.perf_counter() - began
    step = f"step {result.step_time_s * 1e3:.1f} ms" if result.ok else result.reason
    print(f"[{index + 1:>2}/{total}] {label:<34} {result.status:<6} {step}  ({took:.1f} s)")
    sys.stdout.flush()
    return result
