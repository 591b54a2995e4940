"""Pipeline schedules compared: naive, gpipe and 1f1b on a deep MLP, K stages, M micro-batches,
run by the compiled stage tasks (the backward recomputes its forward) and by the eager ones, on
TensorFlow and on JAX.

Every run goes through one `gpk.Experiment`, so all share one data file and each backend one
single-device baseline and one server. Per (backend, schedule, K, M) the table shows the measured
step time, the ratio against naive on the same K and backend, the bubble three ways (measured,
simulated, theoretical), the simulated step time on K independent devices, and the activation
bytes each stage holds; a second table sets the engine's cost per task on each backend side by
side.

On a CPU-only machine the K "devices" are virtual devices sharing the same cores: pipelining cannot
beat one device there, and the measured bubble is not idle hardware. The simulated columns replay
the measured task times on K independent devices; they are a model, labelled as such.

    python benchmarks/pipeline.py                                  # K = 2 4, M = 1 2 4 8
    python benchmarks/pipeline.py --stages 2 --micro-batches 1 4 --steps 8 --json pipe.json
    python benchmarks/pipeline.py --stages 4 --micro-batches 1 8 --width 1024 --engine compiled
    python benchmarks/pipeline.py --backend jax                    # one backend only
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence

from pipeline_runs import BACKENDS, CLASSES, ENGINES, FEATURES, HIDDEN_LAYERS, WIDTH, run_all
from pipeline_table import (
    CPU_STORY,
    LEGEND,
    TASK_COST_LEGEND,
    stage_lines,
    stage_task_lines,
    table_lines,
    task_cost_lines,
)
from text_cells import load_average


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    began = time.perf_counter()
    cores = os.cpu_count()
    print(
        f"workload: MLP {FEATURES}-{'-'.join([str(args.width)] * HIDDEN_LAYERS)}-{CLASSES} "
        f"({HIDDEN_LAYERS + 1} Dense layers), Adam, sparse CE from logits, global batch "
        f"{args.batch}, {args.steps} steps per run (warm-up left out by the kit), virtual CPU "
        f"devices on {cores} cores, on {', '.join(args.backend)}, "
        f"Python {platform.python_version()}; "
        f"load average {load_average()}"
    )
    print("CPU only: the K devices share the same cores; see the note under the table.\n")
    with tempfile.TemporaryDirectory(prefix="gpk_pipeline_") as folder:
        report = run_all(args, pathlib.Path(folder))
    single, rows = report["single"], report["rows"]
    wall = time.perf_counter() - began
    print()
    for backend, one in single.items():
        if one.ok:
            spread = one.step_time_spread_s * 1e3
            print(
                f"{backend} single device (Keras fit, one compiled step): "
                f"{one.step_time_s * 1e3:.1f} ms per step (IQR {spread:.1f})"
            )
        else:
            print(f"{backend} single device: {one.status}: {one.reason}")
    print("\n".join(stage_lines(rows) + stage_task_lines(rows)) + "\n")
    print("\n".join(table_lines(rows)) + "\n")
    print("\n".join(_wrap(text) for text in (LEGEND, CPU_STORY.format(cores=cores))) + "\n")
    print("\n".join(task_cost_lines(rows)) + "\n")
    print(_wrap(TASK_COST_LEGEND))
    print(f"\nwall time {wall:.0f} s; load average {load_average()}")
    if args.json:
        dump = {
            "config": vars(args),
            "wall_time_s": wall,
            "single": {backend: one.to_dict() for backend, one in single.items()},
            "runs": report["raw"],
            "refused": report["refused"],
        }
        pathlib.Path(args.json).write_text(json.dumps(dump, indent=2))
        print(f"raw figures written to {args.json}")
    return 0


def _wrap(text: str, width: int = 100) -> str:
    return textwrap.fill(text, width)


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
    parser.add_argument(
        "--backend",
        nargs="+",
        choices=BACKENDS,
        default=list(BACKENDS),
        help="run every case on these backends, back to back (both)",
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
    args.backend = list(dict.fromkeys(args.backend))
    return args


if __name__ == "__main__":
    sys.exit(main())
