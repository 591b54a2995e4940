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

Each round runs the kit's runs (one comparison of one round) and plain `fit` back to back,
the order reversed every other round, so the machine's drift hits every side alike. Each side's
speed against `single` is taken within each round (single's median step over the side's: one
ratio per pair of runs) and reported as the median of the rounds' ratios with their lowest and
highest, beside the 95 % interval over the rounds (paired:
`gpu_parallel_kit.runs.scheduling.step_intervals`). An interval that holds 1 means no difference
this measurement can show. The summary table has a row per backend, model and side.

    python benchmarks/baseline.py --rounds 5 --backend tensorflow jax
    python benchmarks/baseline.py --model cnn --rounds 5
    python benchmarks/baseline.py --backend jax --model mlp cnn transformer --rounds 7 \
        --strategies single pipeline --no-plain-fit      # the runtime's own cost, per model
"""

from __future__ import annotations

import argparse
import dataclasses
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
    parser.add_argument(
        "--model", nargs="+", choices=workload.MODELS, default=["mlp"], help="workload.py's"
    )
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=list(KIT_SIDES),
        help="the kit's runs, on one device each; single, the baseline, is always run",
    )
    parser.add_argument(
        "--no-plain-fit",
        dest="plain_fit",
        action="store_false",
        help="leave out the plain fit program",
    )
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
    strategies = ["single", *(s for s in args.strategies if s != "single")]
    print(f"load average {load_average()}, {os.cpu_count()} cores; {_describe(args)}")
    report: dict[str, dict[str, dict]] = {}
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gpk_baseline_") as name:
        folder = pathlib.Path(name)
        for model in args.model:
            x, y = workload.data_for(model, args.steps * args.batch)
            np.save(folder / "x.npy", x)
            np.save(folder / "y.npy", y)
            for backend in args.backend:
                sides, spe = _backend(args, backend, model, strategies, folder, (x, y))
                report.setdefault(backend, {})[model] = {"steps": sides, "per_execution": spe}
                rows.extend(_rows(args, backend, model, sides, spe))
    print(f"load average {load_average()}")
    print(_table(rows))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


KIT_SIDES = ("single", "data", "pipeline")  # the kit's runs by default, `single` first
PLAIN = "plain fit"


@dataclasses.dataclass(frozen=True)
class Row:
    """One side of one model on one backend, against `single` in the same rounds."""

    backend: str
    model: str
    side: str
    step_s: float  # the median of the rounds' median steps
    ratios: tuple[float, ...]  # per round: single's median step / this side's
    interval: tuple[float | None, float | None]  # the paired 95 % interval over the rounds
    steps_per_execution: int


def _backend(
    args: argparse.Namespace,
    backend: str,
    model: str,
    strategies: list[str],
    folder: pathlib.Path,
    data,
) -> tuple[dict[str, list[list[float]]], int]:
    """Every round of one model on one backend: each side's step times, per round, and the
    steps per execution the kit's tune chose."""
    exp = gpk.Experiment(
        model=functools.partial(workload.build, model, args.width, args.layers),
        data=data,
        batch_size=args.batch,
        epochs=1,
        backend=backend,
        progress=False,
        log=str(folder / "runs.sqlite"),
    )
    sides: dict[str, list[list[float]]] = {f"{s}×1": [] for s in strategies}
    if args.plain_fit:
        sides[PLAIN] = []
    spe = 1
    for index in range(args.rounds):
        backwards = index % 2 == 1  # every other round in reverse: drift hits every side alike
        if backwards and args.plain_fit:
            sides[PLAIN].append(_plain_fit(args, backend, model, folder, spe))
        comparison = exp.compare(
            strategies[::-1] if backwards else strategies,
            [1],
            rounds=1,
            schedule="naive",
            steps_per_execution=args.steps_per_execution,
            measure_comm=args.measure_comm,
        )
        for result in comparison.results:
            if not result.ok:
                raise SystemExit(f"{backend} {result.strategy}: {result.status}: {result.reason}")
            sides[f"{result.strategy}×1"].append(list(result.step_times_s))
            spe = int(result.extra["tuned"].get("steps_per_execution") or 1)
        if not backwards and args.plain_fit:
            sides[PLAIN].append(_plain_fit(args, backend, model, folder, spe))
    return sides, spe


def _rows(
    args: argparse.Namespace, backend: str, model: str, sides: dict[str, list], spe: int
) -> list[Row]:
    """Each side's row, printed as it is made."""
    base = sides["single×1"]
    base_medians = [statistics.median(steps) for steps in base]
    rows = []
    for side, rounds in sides.items():
        medians = [statistics.median(steps) for steps in rounds]
        ratios = tuple(b / m for b, m in zip(base_medians, medians, strict=True))
        interval = speedup_interval(base, args.batch, rounds, args.batch) or (None, None)
        row = Row(backend, model, side, statistics.median(medians), ratios, interval, spe)
        rows.append(row)
        print(
            f"{backend:<10} {model:<11} {side:<11}: step {row.step_s * 1e3:6.2f} ms, "
            f"speed against single {statistics.median(ratios):.3f} "
            f"(rounds {min(ratios):.3f}–{max(ratios):.3f}; "
            f"95 % {_fmt(interval[0])}–{_fmt(interval[1])}); rounds' medians "
            + " ".join(f"{1e3 * m:.2f}" for m in medians)
            + f" ms; steps/execution {spe}",
            flush=True,
        )
    return rows


def _table(rows: list[Row]) -> str:
    """The summary: per backend, model and side, the median of the rounds' ratios to
    `single` and their spread."""
    lines = [
        "| backend | model | side | step ms | speed vs single (median of rounds) "
        "| rounds' lowest–highest | 95 % interval | steps/execution |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.backend} | {row.model} | {row.side} | {row.step_s * 1e3:.2f} "
            f"| {statistics.median(row.ratios):.3f} "
            f"| {min(row.ratios):.3f}–{max(row.ratios):.3f} "
            f"| {_fmt(row.interval[0])}–{_fmt(row.interval[1])} | {row.steps_per_execution} |"
        )
    return "\n".join(lines)


def _plain_fit(
    args: argparse.Namespace, backend: str, model: str, folder: pathlib.Path, spe: int
) -> list:
    """One run of the plain program: its step times, warm-up left out as the kit leaves it."""
    out = folder / "plain.json"
    command = [sys.executable, str(HERE / PROGRAMS[backend]), "--no-strategy", "--devices", "1"]
    command += ["--model", model, "--batch", str(args.batch), "--epochs", "1"]
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
    models = "; ".join(workload.describe(m, args.width, args.layers) for m in args.model)
    return f"{models}; batch {args.batch}, {args.steps} steps, {args.rounds} rounds"


def _fmt(value: float | None) -> str:
    return "nan" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    sys.exit(main())
