"""What the kit costs on top of training, measured on this machine.

1. Throughput, kit / hand-written, per model (`--model`): the kit's data-parallel run
   (`Experiment.run(strategy="data")`) against the program a user writes by hand: on TensorFlow
   `hand_written.py`, after keras.io's distributed training guide (a fresh interpreter,
   MirroredStrategy with ReductionToOneDevice, `model.fit` on NumPy arrays); on JAX
   (`--backend jax`) `hand_written_jax.py`, after keras.io's distribution guide
   (`keras.distribution.DataParallel`, `set_distribution`, `model.fit` on NumPy arrays).
   Same model, data, global batch, devices and steps; the two alternate round by round, and both are
   timed by the same callback timestamps and reduced by the same functions.
2. Fixed cost of one isolated run: everything the kit spends beyond training (start the worker,
   import, set up devices, build, compile, return the result, exit), from the runner's own figures.

    python benchmarks/overhead.py --devices 2 --rounds 3
    python benchmarks/overhead.py --model mlp cnn transformer --rounds 5   # a ratio per model
    python benchmarks/overhead.py --backend jax --only throughput --model mlp cnn transformer
    GPK_START_METHOD=spawn python benchmarks/overhead.py   # plain interpreters
    python benchmarks/overhead.py --spawn-runs 3           # both methods
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import cloudpickle  # noqa: E402
import numpy as np  # noqa: E402
import workload  # noqa: E402
from first_result import demo_wall_s, first_result  # noqa: E402
from overhead_summary import print_summary  # noqa: E402

import gpu_parallel_kit as gpk  # noqa: E402
import gpu_parallel_kit.api as gpk_api  # noqa: E402
from gpu_parallel_kit.runs.devices import discover_physical_devices  # noqa: E402
from gpu_parallel_kit.runs.process import start_method  # noqa: E402
from gpu_parallel_kit.worker.stats import (  # noqa: E402
    default_warmup_steps,
    median_and_spread,
    step_durations,
)

# The workers need not find this folder on their path: the builder travels by value.
cloudpickle.register_pickle_by_value(workload)


class _EventClock:
    """When each of the worker's events reached the caller, on the caller's clock.

    Installed in place of the kit's progress bar in this process only (the kit is not changed):
    the runner forwards every phase and progress event to it, so a run's fixed cost splits into
    reaching the worker, device set-up, build and compile, training, and what follows training.
    """

    events: list[tuple[float, dict[str, Any]]] = []

    def __init__(self, label: str, enabled: bool = True) -> None:
        _EventClock.events = []

    def __call__(self, event: dict[str, Any]) -> None:
        _EventClock.events.append((time.perf_counter(), event))

    def close(self, result: Any) -> None:
        pass

    @classmethod
    def phases(cls, called: float, returned: float) -> dict[str, float]:
        marks = {e["phase"]: t for t, e in cls.events if e.get("event") == "phase"}
        steps = [t for t, e in cls.events if e.get("event") == "progress"]
        if not steps or not {"building the model", "training"} <= marks.keys():
            nan = float("nan")  # the kit's events changed: no breakdown, the rest still holds
            keys = ("to_worker_s", "devices_s", "build_s", "training_seen_s", "after_training_s")
            return dict.fromkeys(keys, nan)
        last_step = max(steps)
        first = min(marks.values())
        return {
            "to_worker_s": first - called,  # plan, start the process, unpickle the spec
            "devices_s": marks["building the model"] - first,  # logical devices, strategy
            "build_s": marks["training"] - marks["building the model"],  # build, compile, data
            "training_seen_s": last_step - marks["training"],
            "after_training_s": returned - last_step,  # fit's return, result, exit, log row
        }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    gpk_api.run_progress = _EventClock  # this process only; the kit's files are not touched
    with tempfile.TemporaryDirectory(prefix="gpk_bench_") as folder:
        bench = Bench(args, pathlib.Path(folder))
        report = bench.run()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2))
        print(f"\nraw figures written to {args.json}")
    return 0


class _Workload:
    """One model's data on disk (for the hand-written side) and the kit's experiments on it."""

    def __init__(self, name: str, args: argparse.Namespace, folder: pathlib.Path) -> None:
        self.name = name
        samples = args.steps * args.batch  # both sides: exactly `steps` full batches
        x, y = workload.data_for(name, samples, seed=args.seed)
        self.x_path, self.y_path = folder / f"{name}_x.npy", folder / f"{name}_y.npy"
        np.save(self.x_path, x)
        np.save(self.y_path, y)
        builder = functools.partial(workload.build, name, args.width, args.layers)
        common = dict(
            model=builder,
            data=(x, y),
            batch_size=args.batch,
            seed=args.seed,
            progress=False,
            log=str(folder / "runs.sqlite"),  # keep the caller's own run log clean
            tune=args.tune,
        )
        # The throughput's runs, on the backend the hand-written program uses too.
        self.train_exp = gpk.Experiment(epochs=args.epochs, backend=args.backend, **common)
        self.short_exp = gpk.Experiment(epochs=1, steps_per_epoch=args.fixed_steps, **common)
        # The fixed cost on JAX: the same runs from the JAX server (runs/served.py).
        self.short_jax_exp = gpk.Experiment(
            epochs=1, steps_per_epoch=args.fixed_steps, backend="jax", **common
        )


class Bench:
    """One invocation: the data, the experiments of every model, the figures as they come in."""

    def __init__(self, args: argparse.Namespace, folder: pathlib.Path) -> None:
        self.args = args
        self.folder = folder
        self.workloads = {name: _Workload(name, args, folder) for name in args.model}
        first = self.workloads[args.model[0]]  # the fixed cost is measured on the first model
        self.short_exp = first.short_exp
        self.short_jax_exp = first.short_jax_exp

    def run(self) -> dict[str, Any]:
        args = self.args
        method = start_method()
        models = "; ".join(workload.describe(n, args.width, args.layers) for n in args.model)
        print(
            f"workloads: {models}; {args.backend}; global batch {args.batch}, {args.devices} "
            "virtual CPU "
            f"devices, {args.steps} steps x {args.epochs} epochs, {os.cpu_count()} cores; "
            f"kit start method: {method}, tune={args.tune}, measure_comm={args.measure_comm}; "
            f"load average {_load()}"
        )
        began = time.perf_counter()
        discovery_s = _timed(discover_physical_devices)[1]
        report: dict[str, Any] = {"config": vars(args), "start_method": method}
        report["caller_discovery_s"] = discovery_s
        if args.only in ("all", "fixed"):
            report["fixed"] = {}
            for backend in args.fixed_backend:  # alternating would mix the servers' first runs
                key = method if backend == "tensorflow" else f"{method}+{backend}"
                report["fixed"][key] = self.fixed_cost(key, args.fixed_runs + 1)
            report["comparison"] = {
                backend: self.comparison_fixed_cost(backend) for backend in args.fixed_backend
            }
            report["first"] = self.first_results()
        if args.only == "throughput":
            # Start the fork server outside the figures, as the fixed-cost section otherwise does.
            _heading("Starting the kit's workers once, outside the figures")
            warming = self.short_jax_exp if args.backend == "jax" else self.short_exp
            print(f"first run: {self._kit_run(warming)['parent_total_s']:.2f} s")
        if args.only in ("all", "throughput"):
            report["throughput"] = {name: self.throughput(name) for name in args.model}
        if args.spawn_runs and method != "spawn" and args.only in ("all", "fixed"):
            os.environ["GPK_START_METHOD"] = "spawn"
            try:
                report["fixed"]["spawn"] = self.fixed_cost("spawn", args.spawn_runs + 1)
            finally:
                os.environ["GPK_START_METHOD"] = method
        report["benchmark_s"] = time.perf_counter() - began
        print_summary(report, load=_load())
        return report

    def fixed_cost(self, method: str, runs: int) -> dict[str, Any]:
        _heading(
            f"Fixed cost of one isolated run ({method}; {self.args.fixed_steps} training steps)"
        )
        print(
            "     around exp.run, caller's clock (from event arrivals), s              | "
            "runner's figures, s\n"
            "run  total  to worker  devices  build+compile  fit setup  training  after | "
            "process  startup  fixed  parent-only"
        )
        rows = []
        experiment = self.short_jax_exp if method.endswith("+jax") else self.short_exp
        for index in range(runs):
            row = self._kit_run(experiment)
            rows.append(row)
            print(
                f"{index:>3}  {row['parent_total_s']:>5.2f}  {row['to_worker_s']:>9.2f}  "
                f"{row['devices_s']:>7.2f}  {row['build_s']:>13.2f}  {row['fit_setup_s']:>9.2f}  "
                f"{row['wall_time_s']:>8.2f}  {row['after_training_s']:>5.2f} | "
                f"{row['process_s']:>7.2f}  {row['startup_s']:>7.2f}  {row['fixed_s']:>5.2f}  "
                f"{row['parent_only_s']:>11.2f}"
            )
        keys = ("parent_total_s", "process_s", "startup_s", "fixed_s", "parent_only_s")
        keys += ("launch_and_tail_s", "parent_fixed_s", "to_worker_s", "devices_s", "build_s")
        keys += ("fit_setup_s", "after_training_s")
        return {"runs": rows, "first": rows[0], "later_median": _medians(rows[1:], keys)}

    def first_results(self) -> dict[str, Any]:
        """The first result 5 s after loading the kit, servers warmed ahead (first_result.py's
        kernel stand-in, a fresh interpreter each), and `gpk demo`'s wall time, whole command."""
        args = self.args
        _heading(
            f"First result in a fresh kernel, 5 s after loading the kit ({args.first_runs} each), "
            f"and gpk demo's wall time ({args.demo_runs})"
        )
        folder = str(self.folder)
        report: dict[str, Any] = {}
        for backend in args.fixed_backend:
            rows = [first_result(backend, 5.0, True, folder) for _ in range(args.first_runs)]
            if any(row["status"] != "ok" for row in rows):
                raise SystemExit(f"first {backend} run: {[row['status'] for row in rows]}")
            report[backend] = [row["first_result_s"] for row in rows]
            print(f"{backend:<10} first result: " + " ".join(f"{v:.2f}" for v in report[backend]))
        # The demo's own choice (JAX where installed) and TensorFlow's, alternated.
        walls: dict[str, list[float]] = {"demo_wall_s": [], "demo_wall_tensorflow_s": []}
        for _ in range(args.demo_runs):
            walls["demo_wall_s"].append(demo_wall_s(folder))
            walls["demo_wall_tensorflow_s"].append(demo_wall_s(folder, "tensorflow"))
        report.update(walls)
        for key, values in walls.items():
            print(f"{key}: " + " ".join(f"{v:.1f}" for v in values) + " s")
        return report

    def comparison_fixed_cost(self, backend: str) -> dict[str, Any]:
        """Fixed cost per run of a comparison (single, data x1, data xN): wall time beyond the
        runs' training, divided by the runs; the kit's way (the runs set up and warm up side by
        side, then train and measure one at a time) and in turn (each run alone, start to end),
        alternated.

        Training is counted two ways. A run's own rows (`wall_time_s`, warm-up included) are
        the old figure, but warm-up steps taken side by side on shared cores last longer, which
        that figure would count as training; so the fixed cost is also taken beyond the same
        runs' training alone, the in-turn comparisons' rows (median), which the target uses."""
        args = self.args
        experiment = self.short_jax_exp if backend == "jax" else self.short_exp
        # One round: every run of the comparison is a configuration new to it.
        grid = dict(strategies=["single", "data"], devices=[1, args.devices], rounds=1)
        _heading(
            f"Fixed cost per run of a comparison on {backend} ({args.comparisons} of each, "
            "alternated; every run a new configuration, communication measured in each; "
            "'ahead': the kit's way, 'in turn': each run alone)"
        )
        print("comparison  runs started  rounds  wall s  training s  fixed per run s")
        figures: dict[str, list[float]] = {"ahead": [], "in_turn": [], "repeated": []}
        walls: dict[str, list[float]] = {"ahead": [], "in_turn": []}  # one-round comparisons
        alone: list[float] = []  # the in-turn comparisons' training: each run alone
        later: list[float] = []  # a later round's own: from the caller's word to its row
        for index in range(args.comparisons):
            # In 3 rounds, rounds 2 and 3 repeat round 1's configurations, in its processes where
            # they may (runs/resident.py): their own fixed cost is read from their rows below.
            for way, rounds in (("ahead", 1), ("in_turn", 1), ("repeated", REPEATED_ROUNDS)):
                if way == "in_turn":  # this process only: the kit's files are not touched
                    gpk_api.with_gate = _no_gate
                try:
                    logged = len(experiment.log.results())
                    began = time.perf_counter()
                    experiment.compare(**{**grid, "rounds": rounds}, measure_comm=args.measure_comm)
                    wall = time.perf_counter() - began
                finally:
                    gpk_api.with_gate = _KIT_GATE
                rows = experiment.log.results()[logged:]  # every round's own row
                if not all(r.ok for r in rows):
                    raise SystemExit(f"comparison run failed: {[r.reason for r in rows]}")
                training = sum(r.wall_time_s for r in rows)
                per_run = (wall - training) / len(rows)
                if way in walls:
                    walls[way].append(wall)
                if way == "in_turn":
                    alone.append(training)
                later += [
                    r.extra["process_s"] - r.wall_time_s
                    for r in rows
                    if r.extra.get("round", [1, 1])[0] > 1
                ]
                figures[way].append(per_run)
                print(
                    f"{index:>10}  {way.replace('_', ' '):<12}  {rounds:>6}  {wall:>6.2f}  "
                    f"{training:>10.2f}  {per_run:>15.2f}"
                )
        # A later round's fixed cost is its own row's: the caller's time from handing it its
        # turn to its row (`process_s`), less its training. In a 3-round comparison the first
        # round also prepares beside the others (runs/resident.py), so the whole comparison's
        # figure is not one round of new configurations and two of repeated ones.
        runs = len(grid["devices"]) + 1
        training_alone = statistics.median(alone)
        beyond_alone = [(wall - training_alone) / runs for wall in walls["ahead"]]
        new = statistics.median(beyond_alone)
        own_rows = statistics.median(figures["ahead"])
        whole = statistics.median(figures["repeated"])
        repeated = statistics.median(later)
        print(
            f"per run: new configuration {new:.2f} s beyond the runs' training alone "
            f"({training_alone:.2f} s in all), {own_rows:.2f} s beyond "
            f"their own rows'; {REPEATED_ROUNDS} rounds {whole:.2f} s; a later round itself "
            f"{repeated:.2f} s (median of {len(later)})"
        )
        return {
            "runs": runs,
            "ahead_s": figures["ahead"],
            "in_turn_s": figures["in_turn"],
            "rounds_s": figures["repeated"],
            "walls_s": walls,
            "training_alone_s": training_alone,
            "beyond_alone_s": beyond_alone,
            "own_rows_median_s": own_rows,
            "ahead_median_s": new,
            "in_turn_median_s": statistics.median(figures["in_turn"]),
            "rounds_median_s": whole,
            "repeated_s": repeated,
        }

    def throughput(self, name: str) -> dict[str, Any]:
        args = self.args
        work = self.workloads[name]
        _heading(
            f"{name}: throughput, kit vs hand-written ({args.rounds} rounds, alternating; "
            f"samples/s over epochs 2..{args.epochs}, median step over all but warm-up steps)"
        )
        print(
            "round  side  samples/s  step ms (IQR)  epoch s               "
            "warm-up s  after s  beyond training s  total s"
        )
        kit_rows, hand_rows, tuned_rows = [], [], []

        def tuned_hand() -> dict[str, Any]:
            # The hand-written program at the steps per execution tune gave the kit's last run.
            chosen = kit_rows[-1]["tuned"].get("steps_per_execution", 1)
            return self._hand_run(work, steps_per_execution=int(chosen))

        for index in range(args.rounds):
            for side, rows, measure in (
                ("kit", kit_rows, lambda: self._kit_run(work.train_exp)),
                ("hand", hand_rows, lambda: self._hand_run(work)),
                ("spe", tuned_rows, tuned_hand),
            ):
                row = measure()
                rows.append(row)
                epochs = " ".join(f"{t:.2f}" for t in row["epoch_times_s"])
                print(
                    f"{index:>5}  {side:<4}  {row['samples_per_s']:>9.0f}  "
                    f"{row['step_time_s'] * 1e3:>6.1f} ({row['step_spread_s'] * 1e3:>4.1f})  "
                    f"{epochs:<20}  {row['warmup_s']:>9.2f}  {row['after_training_s']:>7.2f}  "
                    f"{row['parent_fixed_s']:>17.2f}  "
                    f"{row['parent_total_s']:>7.2f}"
                )
        return {"kit": kit_rows, "hand": hand_rows, "hand_tuned": tuned_rows}

    def _kit_run(self, exp: gpk.Experiment) -> dict[str, Any]:
        called = time.perf_counter()
        result = exp.run(
            strategy="data",
            devices=self.args.devices,
            measure_comm=self.args.measure_comm,
            steps_per_execution=self.args.steps_per_execution,  # None: tune's choice
        )
        returned = time.perf_counter()
        total = returned - called
        if not result.ok:
            raise SystemExit(f"kit run {result.status}: {result.reason}")
        process = result.extra["process_s"]
        wall = result.wall_time_s
        steps = result.steps_per_epoch
        row = {
            "parent_total_s": total,
            "process_s": process,
            "startup_s": result.startup_s,
            "wall_time_s": wall,
            "fixed_s": process - wall,  # the brief's definition: worker wall time beyond training
            "parent_fixed_s": total - wall,  # the same, seen around exp.run
            "parent_only_s": total - process,  # planning, process start, log row
            "launch_and_tail_s": process - wall - result.startup_s,  # fork, fit return, exit
            "warmup_s": wall - sum(result.step_times_s),  # the first steps: tracing
            "epoch_first_steps_s": [
                result.step_times_s[e * steps - result.warmup_steps]
                for e in range(1, result.epochs)
            ],
            "epoch_times_s": list(result.epoch_times_s),
            "samples_per_s": _epoch_throughput(result.epoch_times_s, steps, result.global_batch),
            "step_time_s": result.step_time_s,
            "step_spread_s": result.step_time_spread_s,
            "steps_per_epoch": steps,
            "loss": result.history.get("loss", []),
            "tuned": result.extra.get("tuned", {}),
            **_EventClock.phases(called, returned),
        }
        # Between the "training" event and fit's on_train_begin: fit distributes the data set
        # and builds its train function; the runner counts that outside wall_time_s.
        row["fit_setup_s"] = row.pop("training_seen_s") - wall
        return row

    def _hand_run(self, work: _Workload, steps_per_execution: int = 1) -> dict[str, Any]:
        args = self.args
        out = self.folder / "hand.json"
        program = HAND_WRITTEN[args.backend]
        command = [sys.executable, str(HERE / program), "--model", work.name]
        command += ["--devices", str(args.devices), "--batch", str(args.batch)]
        command += ["--epochs", str(args.epochs), "--width", str(args.width)]
        command += ["--layers", str(args.layers), "--seed", str(args.seed)]
        command += ["--x", str(work.x_path), "--y", str(work.y_path), "--out", str(out)]
        command += ["--inter-op-threads", str(args.hand_inter_op_threads)]
        command += ["--steps-per-execution", str(steps_per_execution)]
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        ended = time.perf_counter()
        total = ended - began
        if done.returncode != 0:
            raise SystemExit(f"hand-written run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        raw = json.loads(out.read_text())
        ends = raw["batch_ends"]  # one per execution of `steps_per_execution` steps
        per = steps_per_execution
        durations = [d / per for d in step_durations(ends, raw["train_begin"])]  # as the kit
        warmup = default_warmup_steps(len(durations))
        median, spread = median_and_spread(durations[warmup:])
        steps = len(ends) // raw["epochs"]  # executions per epoch
        wall = ends[-1] - raw["train_begin"]
        return {
            "parent_total_s": total,
            "launch_s": raw["process_begin"] - began,  # both clocks are CLOCK_MONOTONIC
            "import_s": raw["import_s"],
            "startup_s": raw["startup_s"],
            "wall_time_s": wall,
            "fit_return_s": raw["fit_return_s"],
            "after_training_s": ended - ends[-1],  # fit's return, interpreter teardown, exit
            "warmup_s": sum(durations[:warmup]),
            "epoch_first_steps_s": [durations[e * steps] for e in range(1, raw["epochs"])],
            "parent_fixed_s": total - wall,
            "epoch_times_s": raw["epoch_times_s"],
            "samples_per_s": _epoch_throughput(
                raw["epoch_times_s"], steps * per, raw["global_batch"]
            ),
            "step_time_s": median,
            "step_spread_s": spread,
            "steps_per_epoch": steps * per,
            "steps_per_execution": per,
            "loss": raw["loss"],
        }


# The program a user writes by hand for data parallelism, per backend.
HAND_WRITTEN = {"tensorflow": "hand_written.py", "jax": "hand_written_jax.py"}
_KIT_GATE = gpk_api.with_gate
REPEATED_ROUNDS = 3  # the kit's default


def _no_gate(spec: Any) -> Any:
    return spec


def _epoch_throughput(epoch_times: Sequence[float], steps: int, global_batch: int) -> float | None:
    """Samples per second over the epochs after the first (the first traces and compiles)."""
    later = epoch_times[1:]
    return steps * global_batch * len(later) / sum(later) if later else None


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _medians(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, float]:
    return {key: statistics.median(row[key] for row in rows) for key in keys} if rows else {}


def _timed(function: Callable[[], Any]) -> tuple[Any, float]:
    began = time.perf_counter()
    value = function()
    return value, time.perf_counter() - began


def _heading(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Throughput of the kit against a hand-written MirroredStrategy program, "
        "and the fixed cost of one isolated run."
    )
    parser.add_argument("--devices", type=int, default=2, help="virtual CPU devices (replicas)")
    parser.add_argument(
        "--model",
        nargs="+",
        choices=workload.MODELS,
        default=["mlp"],
        help="models to compare on (mlp: the MLP of --width/--layers; cnn, transformer: the "
        "kit's built-ins); the fixed cost is measured on the first",
    )
    parser.add_argument(
        "--tune", choices=("auto", "off"), default="auto", help="the kit's tune for its runs"
    )
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=None,
        help="force the kit's steps per execution (default: tune's choice), to check tune's rule",
    )
    parser.add_argument(
        "--no-measure-comm",
        dest="measure_comm",
        action="store_false",
        help="the kit's runs skip the communication measurement after training",
    )
    parser.add_argument(
        "--backend",
        choices=("tensorflow", "jax"),
        default="tensorflow",
        help="the throughput's backend: the kit's runs and the hand-written program "
        "(hand_written.py: MirroredStrategy; hand_written_jax.py: keras.distribution."
        "DataParallel)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="kit/hand pairs, alternating")
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per throughput run (>= 2)")
    parser.add_argument("--batch", type=int, default=256, help="global batch")
    parser.add_argument("--width", type=int, default=workload.DEFAULT_WIDTH)
    parser.add_argument("--layers", type=int, default=workload.DEFAULT_LAYERS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fixed-runs", type=int, default=4, help="fixed-cost runs after the first one"
    )
    parser.add_argument("--fixed-steps", type=int, default=2, help="training steps per such run")
    parser.add_argument(
        "--spawn-runs",
        type=int,
        default=0,
        help="also measure the fixed cost with GPK_START_METHOD=spawn: runs after the first",
    )
    parser.add_argument(
        "--first-runs", type=int, default=2, help="first results timed per backend (fresh kernel)"
    )
    parser.add_argument("--demo-runs", type=int, default=3, help="gpk demo runs timed")
    parser.add_argument(
        "--comparisons",
        type=int,
        default=3,
        help="comparisons of each kind (runs started ahead, in turn) for the fixed cost per run",
    )
    parser.add_argument("--only", choices=("all", "throughput", "fixed"), default="all")
    parser.add_argument(
        "--fixed-backend",
        nargs="+",
        choices=("tensorflow", "jax"),
        default=["tensorflow"],
        help="backends whose fixed cost is measured, one after the other (jax: from its server)",
    )
    parser.add_argument(
        "--hand-inter-op-threads",
        type=int,
        default=0,
        help="inter-op threads for the hand-written program (0: TensorFlow's default)",
    )
    parser.add_argument("--json", help="also write every raw figure to this JSON file")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: throughput is taken over epochs after the first")
    if args.batch % args.devices:
        parser.error(f"--batch {args.batch} must be a multiple of --devices {args.devices}")
    if min(args.rounds, args.steps, args.fixed_steps) < 1 or args.fixed_runs < 1:
        parser.error("--rounds, --steps, --fixed-runs and --fixed-steps must be at least 1")
    return args


if __name__ == "__main__":
    sys.exit(main())
