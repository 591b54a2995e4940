"""Pipeline schedules compared: naive, gpipe and 1f1b on a deep MLP, K stages, M micro-batches,
run by the compiled stage tasks (the backward recomputes its forward) and by the eager ones.

Every run goes through one `gpk.Experiment`, so all share one single-device baseline, one fork
server and one data file. Per (schedule, K, M) the table shows the measured step time, the ratio
against naive on the same K, the bubble three ways (measured, simulated, theoretical), the
simulated step time on K independent devices, and the activation bytes each stage holds.

On a CPU-only machine the K "devices" are virtual devices sharing the same cores: pipelining cannot
beat one device there, and the measured bubble is not idle hardware. The simulated columns replay
the measured task times on K independent devices; they are a model, labelled as such.

    python benchmarks/pipeline.py                                  # K = 2 4, M = 1 2 4 8
    python benchmarks/pipeline.py --stages 2 --micro-batches 1 4 --steps 8 --json pipe.json
    python benchmarks/pipeline.py --stages 4 --micro-batches 1 8 --width 1024 --engine compiled
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import gpu_parallel_kit as gpk

FEATURES = 256
CLASSES = 10
WIDTH = 512  # --width: 512 gives about 2.5 M parameters; 1024 gives a micro-batch more work
HIDDEN_LAYERS = 10  # + the output layer: 11 Dense layers
ENGINES = {"compiled": True, "eager": False}  # recompute= of each engine
SCHEDULES = ("naive", "gpipe", "1f1b")

CPU_STORY = (
    "Virtual CPU devices share the machine's {cores} cores: stages run in threads that take turns "
    "on the same cores, so pipelining cannot beat one device here, and the measured bubble is not "
    "idle hardware: the cores stay busy with another stage's thread. The simulated columns "
    "replay each stage's median measured task times on K independent devices (no transfer time): "
    "a model of real hardware, not a measurement."
)

LEGEND = (
    "Medians over the steps after warm-up. naive/this: naive's step time (same K) / this one's, "
    ">1 = faster. bubble measured: 1 - busy / (K x task span) over the timed steps, as the kit "
    "computes it (a task's time starts once its input has arrived). "
    "task span: first task start to last task end in a timed step; outside tasks: "
    "step - task span (optimizer updates, splitting the batch, the data). work alone: the sum of "
    "task times of one of the kit's serial passes (run after training, weights restored), each "
    "task measured alone. SIMULATED step: the schedule replayed on K independent devices with "
    "those task times (medians per stage and kind over three passes), ending with each stage's "
    "measured update; no transfer time. act. held: bytes of the layer outputs of the "
    "micro-batches one stage holds at its peak (peak live micro-batches x one micro-batch's "
    "outputs), max over stages; act. 1f1b/gpipe: 1f1b's figure over gpipe's at the same K and M."
)


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
    engine: str = "compiled"  # compiled (recompute) | eager (tape kept)

    def __str__(self) -> str:
        return f"{self.engine} {self.schedule} K={self.stages} M={self.micro_batches}"


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
    outside_s: float | None = None  # median per step: time outside every task
    activation_bytes: list[int] = field(default_factory=list)  # per stage, held at peak
    live: list[int] = field(default_factory=list)  # per stage: micro-batches held at once
    parameter_bytes: list[int] = field(default_factory=list)
    layers: list[int] = field(default_factory=list)  # layers per stage

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
            outside_s=extra.get("outside_tasks_s"),
            activation_bytes=[s["activation_bytes_held"] for s in stages],
            live=[s["peak_live_micro_batches"] for s in stages],
            parameter_bytes=[s["parameter_bytes"] for s in stages],
            layers=[len(s["layers"]) for s in stages],
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
) -> tuple[list[Case], list[str]]:
    """Every case the kit accepts, in run order, and one line per case it refused.

    naive runs once per K, with M=1 (the kit refuses it with more micro-batches), as the baseline;
    then gpipe and 1f1b side by side per M, so drift of the machine hits both alike.
    """
    cases, refused = [], []
    for k in dict.fromkeys(stages):
        grid = []
        for engine in engines:
            grid += [Case("naive", k, 1, engine)]
            grid += [
                Case(s, k, m, engine) for m in dict.fromkeys(micro_batches) for s in SCHEDULES[1:]
            ]
        for case in grid:
            try:
                exp.plan(
                    "model",
                    k,
                    schedule=case.schedule,
                    micro_batches=case.micro_batches,
                    recompute=ENGINES[case.engine],
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
    cases, refused = plan_cases(exp, args.stages, args.micro_batches, args.engine)
    for line in refused:
        print(f"skipped (refused by the kit) {line}")
    print(f"{len(cases) + 1} runs: the single-device baseline, then {len(cases)} pipelines\n")
    single = _timed_run(exp, "single", 1, "single K=1", 0, len(cases) + 1)
    rows: list[Row] = []
    raw: list[dict[str, Any]] = []
    for index, case in enumerate(cases, start=1):
        result = _timed_run(
            exp,
            "model",
            case.stages,
            str(case),
            index,
            len(cases) + 1,
            schedule=case.schedule,
            micro_batches=case.micro_batches,
            recompute=ENGINES[case.engine],
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
    print(f"[{index + 1:>2}/{total}] {label:<18} {result.status:<6} {step}  ({took:.1f} s)")
    sys.stdout.flush()
    return result


# --- the table: plain numbers in, text out ------------------------------------------------


HEADER = (
    "engine",
    "schedule",
    "K",
    "M",
    "step ms (IQR)",
    "naive/this",
    "task span ms",
    "outside tasks ms",
    "task overhead ms",
    "bubble measured",
    "bubble SIMULATED",
    "bubble theory",
    "work alone ms",
    "work alone / naive's",
    "SIMULATED step ms",
    "SIMULATED naive/this",
    "act. held max/stage",
    "live micro-batches per stage",
    "act. 1f1b/gpipe",
)


def table_lines(rows: Sequence[Row]) -> list[str]:
    """A Markdown table (readable as is in a terminal) with one line per case."""
    naive = {
        (r.case.engine, r.case.stages): r
        for r in rows
        if r.case.schedule == "naive" and r.status == "ok"
    }
    gpipe = {
        (r.case.engine, r.case.stages, r.case.micro_batches): r
        for r in rows
        if r.case.schedule == "gpipe" and r.status == "ok"
    }
    cells = [list(HEADER)]
    for r in rows:
        if r.status != "ok":
            cells.append(
                [r.case.engine, r.case.schedule, str(r.case.stages), str(r.case.micro_batches)]
            )
            cells[-1] += [f"{r.status}: {r.reason}"] + [""] * (len(HEADER) - 5)
            continue
        base = naive.get((r.case.engine, r.case.stages))
        twin = gpipe.get((r.case.engine, r.case.stages, r.case.micro_batches))
        act_ratio = None
        if r.case.schedule == "1f1b" and twin and twin.peak_activation_bytes:
            act_ratio = r.peak_activation_bytes / twin.peak_activation_bytes
        cells.append(
            [
                r.case.engine,
                r.case.schedule,
                str(r.case.stages),
                str(r.case.micro_batches),
                f"{r.step_s * 1e3:.1f} ({r.spread_s * 1e3:.1f})",
                _ratio(base.step_s if base else None, r.step_s),
                _number(r.task_span_s and r.task_span_s * 1e3, "{:.1f}"),
                _number(r.outside_tasks_s and r.outside_tasks_s * 1e3, "{:.1f}"),
                _number(r.task_overhead_s and r.task_overhead_s * 1e3, "{:.2f}"),
                _fraction(r.bubble_measured),
                _fraction(r.bubble_simulated),
                _fraction(r.bubble_theoretical),
                _number(r.work_alone_s and r.work_alone_s * 1e3, "{:.1f}"),
                _ratio(r.work_alone_s, base.work_alone_s if base else None),
                _number(r.simulated_step_s and r.simulated_step_s * 1e3, "{:.1f}"),
                _ratio(base.simulated_step_s if base else None, r.simulated_step_s),
                _bytes(r.peak_activation_bytes),
                ",".join(str(n) for n in r.live),
                _number(act_ratio, "{:.2f}"),
            ]
        )
    widths = [max(len(row[c]) for row in cells) for c in range(len(HEADER))]
    lines = [_line(row, widths) for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines


def _line(row: Sequence[str], widths: Sequence[int]) -> str:
    return "| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |"


def _ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}" if numerator and denominator else ""


def _fraction(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _number(value: float | None, pattern: str) -> str:
    return "" if value is None else pattern.format(value)


def _bytes(value: int | None) -> str:
    return "" if value is None else f"{value / 2**20:.2f} MiB"


def stage_lines(rows: Sequence[Row]) -> list[str]:
    """How the kit cut the model: layers and parameter bytes per stage, once per K."""
    lines, seen = [], set()
    for r in rows:
        if r.status != "ok" or r.case.stages in seen:
            continue
        seen.add(r.case.stages)
        parts = ", ".join(
            f"{n} layers / {b / 2**20:.2f} MiB"
            for n, b in zip(r.layers, r.parameter_bytes, strict=True)
        )
        lines.append(f"K={r.case.stages}: {parts}")
    return lines


# --- the command ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    began = time.perf_counter()
    cores = os.cpu_count()
    print(
        f"workload: MLP {FEATURES}-{'-'.join([str(args.width)] * HIDDEN_LAYERS)}-{CLASSES} "
        f"({HIDDEN_LAYERS + 1} Dense layers), Adam, sparse CE from logits, global batch "
        f"{args.batch}, {args.steps} steps per run (warm-up left out by the kit), virtual CPU "
        f"devices on {cores} cores, Python {platform.python_version()}; load average {_load()}"
    )
    print("CPU only: the K devices share the same cores; see the note under the table.\n")
    with tempfile.TemporaryDirectory(prefix="gpk_pipeline_") as folder:
        report = run_all(args, pathlib.Path(folder))
    single, rows = report["single"], report["rows"]
    wall = time.perf_counter() - began
    print()
    if single.ok:
        spread = single.step_time_spread_s * 1e3
        print(
            "single device (Keras fit, one compiled graph per step): "
            f"{single.step_time_s * 1e3:.1f} ms per step (IQR {spread:.1f})"
        )
    else:
        print(f"single device: {single.status}: {single.reason}")
    print("\n".join(stage_lines(rows)) + "\n")
    print("\n".join(table_lines(rows)) + "\n")
    print("\n".join(_wrap(text) for text in (LEGEND, CPU_STORY.format(cores=cores))))
    print(f"\nwall time {wall:.0f} s; load average {_load()}")
    if args.json:
        dump = {
            "config": vars(args),
            "wall_time_s": wall,
            "single": single.to_dict(),
            "runs": report["raw"],
            "refused": report["refused"],
        }
        pathlib.Path(args.json).write_text(json.dumps(dump, indent=2))
        print(f"raw figures written to {args.json}")
    return 0


def _wrap(text: str, width: int = 100) -> str:
    return textwrap.fill(text, width)


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Compare naive, gpipe and 1f1b pipeline schedules on a deep MLP."
    )
    parser.add_argument("--stages", type=int, nargs="+", default=[2, 4], help="K values")
    parser.add_argument(
        "--micro-batches", type=int, nargs="+", default=[1, 2, 4, 8], help="M values"
    )
    parser.add_argument("--steps", type=int, default=10, help="training steps per run")
    parser.add_argument("--width", type=int, default=WIDTH, help="units of each hidden layer")
    parser.add_argument(
        "--engine",
        nargs="+",
        choices=list(ENGINES),
        default=list(ENGINES),
        help="stage tasks: compiled (the backward recomputes the forward) and/or eager",
    )
    parser.add_argument("--batch", type=int, default=256, help="global batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write every raw figure to this JSON file")
    args = parser.parse_args(argv)
    if args.steps < 5:
        # The kit leaves 2 warm-up steps out and times every task of the next 3.
        parser.error(f"--steps {args.steps} is too few; use at least 5 (2 warm-up + 3 timed)")
    if min(args.stages) < 1 or min(args.micro_batches) < 1:
        parser.error("--stages and --micro-batches take whole numbers of at least 1")
    if max(args.stages) > HIDDEN_LAYERS + 1:
        parser.error(f"--stages: the model has {HIDDEN_LAYERS + 1} layers; use at most that")
    return args


if __name__ == "__main__":
    sys.exit(main())
