"""Are `single`, `data`×1, `pipeline`×1 and plain `fit` one speed, once measured side by side?

All four train the same model on batches of the same size on one device:
- `single`, the baseline every speedup is taken against;
- `data`×1, the data-parallel engine on one device (TensorFlow: MirroredStrategy over one
  device; JAX: `keras.distribution.DataParallel` over a one-device mesh);
- `pipeline`×1, the pipeline runtime with one stage and one micro-batch (naive): nothing to
  pipeline, so any gap is the runtime's own;
- plain `fit`, the program a user writes without any strategy (`hand_written.py --no-strategy`,
  `hand_written_jax.py --no-strategy`: `model.fit` on NumPy arrays in a fresh interpreter), at
  the steps per execution the kit's tune chose for its runs, so only the code paths differ.

Each round runs the kit's three (one comparison of one round) and then plain `fit`, so the
machine's drift hits all four alike; each ratio of step times to `single`'s comes with its 95 %
interval over the rounds (paired: `gpu_parallel_kit.runs.scheduling.step_intervals`). An interval
that holds 1 means no difference this measurement can show.

    python benchmarks/baseline.py --rounds 5 --backend tensorflow jax
    python benchmarks/baseline.py --model cnn --rounds 5
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

HERE = pathlib.Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import cloudpickle  # noqa: E402
import numpy as np  # noqa: E402
import workload  # noqa: E402
from text_cells import load_average  # noqa: E402

import gpu_parallel_kit as gpk  # noqa: E402
from gpu_parallel_kit.runs.scheduling.step_intervals import speedup_interval  # noqa: E402
from gpu_parallel_kit.worker.measuring.stats import default_warmup_steps, step_durations  # noqa: E402

cloudpickle.register_pickle_by_value(workload)  # the builder travels to the workers by value
PROGRAMS = {"tensorflow": "hand_written.py", "jax": "hand_written_jax.py"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", nargs="+", default=["tensorflow", "jax"])
    parser.add_argument("--model", choices=workload.MODELS, default="mlp", help="workload.py")
    parser.add_argument("--steps", type=int, default=24, help="steps per run")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=workload.DEFAULT_WIDTH)
    parser.add_argument("--layers", type=int, default=workload.DEFAULT_LAYERS)
    parser.add_argument(
        "--steps-per-execution", type=int, default=None, help="force the kit's (default: tune's)"
    )
    parser.add_argument(
        "--no-measure-comm",
        dest="measure_comm",
        action="store_false",
        help="data×1 skips its communication measurement",
    )
    parser.add_argument("--json", help="also write every round's steps to this JSON file")
    args = parser.parse_args(argv)
    print(f"load average {load_average()}, {os.cpu_count()} cores; {_describe(args)}")
    report = {}
    with tempfile.TemporaryDirectory(prefix="gpk_baseline_") as name:
        folder = pathlib.Path(name)
        x, y = workload.data_for(args.model, args.steps * args.batch)
        np.save(folder / "x.npy", x)
        np.save(folder / "y.npy", y)
        for backend in args.backend:
            report[backend] = _backend(args, backend, folder, (x, y))
    print(f"load average {load_average()}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


def _backend(args: argparse.Namespace, backend: str, folder: pathlib.Path, data) -> dict:
    exp = gpk.Experiment(
        model=functools.partial(workload.build, args.model, args.width, args.layers),
        data=data,
        batch_size=args.batch,
        epochs=1,
        backend=backend,
        progress=False,
        log=str(folder / "runs.sqlite"),
    )
    sides: dict[str, list[list[float]]] = {
        "single×1": [],
        "data×1": [],
        "pipeline×1": [],
        "plain fit": [],
    }
    for _ in range(args.rounds):
        comparison = exp.compare(
            ["single", "data", "pipeline"],
            [1],
            rounds=1,
            schedule="naive",
            steps_per_execution=args.steps_per_execution,
            measure_comm=args.measure_comm,
        )
        spe = 1
        for result in comparison.results:
            if not result.ok:
                raise SystemExit(f"{backend} {result.strategy}: {result.status}: {result.reason}")
            sides[f"{result.strategy}×1"].append(list(result.step_times_s))
            spe = int(result.extra["tuned"].get("steps_per_execution") or 1)
        sides["plain fit"].append(_plain_fit(args, backend, folder, spe))
    base = sides["single×1"]
    base_step = statistics.median(statistics.median(steps) for steps in base)
    for side, rounds in sides.items():
        medians = [statistics.median(steps) for steps in rounds]
        low, high = speedup_interval(base, args.batch, rounds, args.batch) or (None, None)
        ratio = base_step / statistics.median(medians)
        print(
            f"{backend:<10} {side:<10}: step {statistics.median(medians) * 1e3:6.2f} ms, "
            f"speed against single {ratio:.3f} ({_fmt(low)}–{_fmt(high)}); rounds' medians "
            + " ".join(f"{1e3 * m:.2f}" for m in medians)
            + f" ms; steps/execution {spe}",
            flush=True,
        )
    return sides


def _plain_fit(args: argparse.Namespace, backend: str, folder: pathlib.Path, spe: int) -> list:
    """One run of the plain program: its step times, warm-up left out as the kit leaves it."""
    out = folder / "plain.json"
    command = [sys.executable, str(HERE / PROGRAMS[backend]), "--no-strategy", "--devices", "1"]
    command += ["--model", args.model, "--batch", str(args.batch), "--epochs", "1"]
    command += ["--width", str(args.width), "--layers", str(args.layers)]
    command += ["--x", str(folder / "x.npy"), "--y", str(folder / "y.npy"), "--out", str(out)]
    command += ["--steps-per-execution", str(spe)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"plain fit on {backend} failed:\n{done.stderr[-3000:]}")
    raw = json.loads(out.read_text())
    durations = [d / spe for d in step_durations(raw["batch_ends"], raw["train_begin"])]
    return durations[default_warmup_steps(len(durations)) :]


def _describe(args: argparse.Namespace) -> str:
    return (
        f"{workload.describe(args.model, args.width, args.layers)}, batch {args.batch}, "
        f"{args.steps} steps, {args.rounds} rounds"
    )


def _fmt(value: float | None) -> str:
    return "nan" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
