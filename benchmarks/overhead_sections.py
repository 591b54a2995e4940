"""The sections of overhead.py, each printing its figures as they come in: the fixed cost of
one isolated run, of a comparison's runs, the first result in a fresh kernel, and throughput
against the hand-written program."""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import workload
from first_result import demo_wall_s, first_result
from overhead_runs import Workload, hand_run, kit_run
from overhead_summary import print_summary
from text_cells import load_average

import gpu_parallel_kit.api as gpk_api
from gpu_parallel_kit.runs.description.device_choice import discover_physical_devices
from gpu_parallel_kit.runs.processes.child_process import start_method

_KIT_GATE = gpk_api.with_gate
REPEATED_ROUNDS = 3  # the kit's default


class Bench:
    """One invocation: the data, the experiments of every model, the figures as they come in."""

    def __init__(self, args: argparse.Namespace, folder: pathlib.Path) -> None:
        self.args = args
        self.folder = folder
        self.workloads = {name: Workload(name, args, folder) for name in args.model}
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
            f"load average {load_average()}"
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
            print(f"first run: {kit_run(self.args, warming)['parent_total_s']:.2f} s")
        if args.only in ("all", "throughput"):
            report["throughput"] = {name: self.throughput(name) for name in args.model}
        if args.spawn_runs and method != "spawn" and args.only in ("all", "fixed"):
            os.environ["GPK_START_METHOD"] = "spawn"
            try:
                report["fixed"]["spawn"] = self.fixed_cost("spawn", args.spawn_runs + 1)
            finally:
                os.environ["GPK_START_METHOD"] = method
        report["benchmark_s"] = time.perf_counter() - began
        print_summary(report, load=load_average())
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
            row = kit_run(self.args, experiment)
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
            # they may (runs/scheduling/resident_rounds.py): their own fixed cost is read from their
            # rows below.
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
        # round also prepares beside the others (runs/scheduling/resident_rounds.py), so the whole
        # comparison's figure is not one round of new configurations and two of repeated ones.
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
            return hand_run(self.args, self.folder, work, steps_per_execution=int(chosen))

        for index in range(args.rounds):
            for side, rows, measure in (
                ("kit", kit_rows, lambda: kit_run(self.args, work.train_exp)),
                ("hand", hand_rows, lambda: hand_run(self.args, self.folder, work)),
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


def _no_gate(spec: Any) -> Any:
    return spec


def _medians(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, float]:
    return {key: statistics.median(row[key] for row in rows) for key in keys} if rows else {}


def _timed(function: Callable[[], Any]) -> tuple[Any, float]:
    began = time.perf_counter()
    value = function()
    return value, time.perf_counter() - began


def _heading(text: str) -> None:
    print(f"\n== {text}", flush=True)
