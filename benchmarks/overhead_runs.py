"""One measured run of each side of overhead.py: the kit's `exp.run`, with the arrival times
of its worker's events, and the hand-written program in a fresh interpreter."""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import cloudpickle
import numpy as np
import workload

import gpu_parallel_kit as gpk
from gpu_parallel_kit.worker.measuring.stats import (
    default_warmup_steps,
    median_and_spread,
    step_durations,
)

HERE = pathlib.Path(__file__).resolve().parent
# The program a user writes by hand for data parallelism, per backend.
HAND_WRITTEN = {"tensorflow": "hand_written.py", "jax": "hand_written_jax.py"}

# The workers need not find this folder on their path: the builder travels by value.
cloudpickle.register_pickle_by_value(workload)


class EventClock:
    """When each of the worker's events reached the caller, on the caller's clock.

    Installed in place of the kit's progress bar in this process only (the kit is not changed):
    the runner forwards every phase and progress event to it, so a run's fixed cost splits into
    reaching the worker, device set-up, build and compile, training, and what follows training.
    """

    events: list[tuple[float, dict[str, Any]]] = []

    def __init__(self, label: str, enabled: bool = True) -> None:
        EventClock.events = []

    def __call__(self, event: dict[str, Any]) -> None:
        EventClock.events.append((time.perf_counter(), event))

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


class Workload:
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
        # The fixed cost on JAX: the same runs from the JAX server
        # (runs/processes/server_client.py).
        self.short_jax_exp = gpk.Experiment(
            epochs=1, steps_per_epoch=args.fixed_steps, backend="jax", **common
        )


def kit_run(args: argparse.Namespace, exp: gpk.Experiment) -> dict[str, Any]:
    """One data-parallel run of the kit: its figures, its fixed cost and its phases."""
    called = time.perf_counter()
    result = exp.run(
        strategy="data",
        devices=args.devices,
        measure_comm=args.measure_comm,
        steps_per_execution=args.steps_per_execution,  # None: tune's choice
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
            result.step_times_s[e * steps - result.warmup_steps] for e in range(1, result.epochs)
        ],
        "epoch_times_s": list(result.epoch_times_s),
        "samples_per_s": _epoch_throughput(result.epoch_times_s, steps, result.global_batch),
        "step_time_s": result.step_time_s,
        "step_spread_s": result.step_time_spread_s,
        "steps_per_epoch": steps,
        "loss": result.history.get("loss", []),
        "tuned": result.extra.get("tuned", {}),
        **EventClock.phases(called, returned),
    }
    # Between the "training" event and fit's on_train_begin: fit distributes the data set
    # and builds its train function; the runner counts that outside wall_time_s.
    row["fit_setup_s"] = row.pop("training_seen_s") - wall
    return row


def hand_run(
    args: argparse.Namespace,
    folder: pathlib.Path,
    work: Workload,
    steps_per_execution: int = 1,
) -> dict[str, Any]:
    """One run of the hand-written program in a fresh interpreter, reduced as the kit's."""
    out = folder / "hand.json"
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
        "samples_per_s": _epoch_throughput(raw["epoch_times_s"], steps * per, raw["global_batch"]),
        "step_time_s": median,
        "step_spread_s": spread,
        "steps_per_epoch": steps * per,
        "steps_per_execution": per,
        "loss": raw["loss"],
    }


def _epoch_throughput(epoch_times: Sequence[float], steps: int, global_batch: int) -> float | None:
    """Samples per second over the epochs after the first (the first traces and compiles)."""
    later = epoch_times[1:]
    return steps * global_batch * len(later) / sum(later) if later else None
