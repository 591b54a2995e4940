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
import json
import pathlib
import sys
import tempfile
from collections.abc import Sequence

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import workload  # noqa: E402
from overhead_runs import EventClock  # noqa: E402
from overhead_sections import Bench  # noqa: E402

import gpu_parallel_kit.api as gpk_api  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    gpk_api.run_progress = EventClock  # this process only; the kit's files are not touched
    with tempfile.TemporaryDirectory(prefix="gpk_bench_") as folder:
        bench = Bench(args, pathlib.Path(folder))
        report = bench.run()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2))
        print(f"\nraw figures written to {args.json}")
    return 0


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
