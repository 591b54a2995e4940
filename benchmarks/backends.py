"""TensorFlow and JAX side by side: the same model, data, batch and devices, alternated in one run.

    python benchmarks/backends.py --model mlp transformer --devices 1 2 4 --rounds 3

For each model, each round runs every configuration once on each backend, TensorFlow and JAX
alternating (so drift hits both): `single` on one device, `data` on each device count, and on
JAX `tensor` on each count above one. It prints the median step time of each configuration over
the rounds, its spread across rounds, and the JAX/TensorFlow ratio where both ran. On virtual
devices carved out of a 2-core CPU the devices share the cores: these are the backends' runtime
costs on shared cores, not a GPU's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile

import gpu_parallel_kit as gpk

DATA = {"mlp": "tabular", "cnn": "images", "transformer": "tokens"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", nargs="+", default=["mlp"], choices=list(DATA))
    parser.add_argument("--devices", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=24, help="steps per run")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--json", help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}")
    report = {}
    with tempfile.TemporaryDirectory(prefix="gpk_backends_") as folder:
        for name in args.model:
            report[name] = _model(name, args, pathlib.Path(folder))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


def _model(name: str, args: argparse.Namespace, folder: pathlib.Path) -> dict:
    plans = [("single", 1)] + [("data", n) for n in args.devices if n > 1]
    tensor = [("tensor", n) for n in args.devices if n > 1]
    experiments = {
        backend: gpk.Experiment(
            name,
            DATA[name],
            batch_size=args.batch,
            steps_per_epoch=args.steps,
            backend=backend,
            progress=False,
            log=str(folder / "runs.sqlite"),
        )
        for backend in ("tensorflow", "jax")
    }
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for strategy, devices in plans + tensor:
            for backend in ("tensorflow", "jax"):
                if strategy == "tensor" and backend == "tensorflow":
                    continue
                result = experiments[backend].run(strategy, devices)
                if not result.ok:
                    print(f"{backend} {strategy}×{devices}: {result.reason}", file=sys.stderr)
                    continue
                times.setdefault(f"{backend} {strategy}×{devices}", []).append(result.step_time_s)
    print(f"\n{name}, global batch {args.batch}, {args.steps} steps per run, {args.rounds} rounds")
    print(f"{'configuration':<26} {'median step ms':>15} {'spread ms':>10} {'jax/tf':>7}")
    summary = {}
    for strategy, devices in plans + tensor:
        for backend in ("tensorflow", "jax"):
            key = f"{backend} {strategy}×{devices}"
            if key not in times:
                continue
            median = statistics.median(times[key])
            spread = max(times[key]) - min(times[key])
            tf_key = f"tensorflow {strategy}×{devices}"
            ratio = (
                f"{median / statistics.median(times[tf_key]):.2f}"
                if backend == "jax" and tf_key in times
                else ""
            )
            summary[key] = {"median_s": median, "all_s": times[key]}
            print(f"{key:<26} {median * 1000:>15.2f} {spread * 1000:>10.2f} {ratio:>7}")
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
