"""Replicas in one process against replicas in several: single, data and multiworker side by side.

One `gpk.Experiment` runs every configuration in turn, `--rounds` times, alternating them so drift
hits all alike. Per configuration the table shows the median step time, the step-time ratio against
`data` on the same replica count (one process holding the replicas as virtual devices), the exposed
all-reduce and the standalone all-reduce (the collective alone, between worker processes for
multiworker). On a CPU machine every worker is a process on the same cores: the figures show what
crossing processes costs, not what a second machine would add.

    python benchmarks/multiworker.py                        # replicas 2 4, 3 rounds
    python benchmarks/multiworker.py --replicas 2 --rounds 5 --json mw.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any

import numpy as np
from text_cells import number_cell

import gpu_parallel_kit as gpk

FEATURES = 256
CLASSES = 10


def build_model():
    import keras

    model = keras.Sequential(
        [keras.Input((FEATURES,))]
        + [keras.layers.Dense(512, activation="relu") for _ in range(3)]
        + [keras.layers.Dense(CLASSES)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="steps per run")
    parser.add_argument("--batch", type=int, default=256, help="global batch")
    parser.add_argument("--json", metavar="PATH", help="write every run's figures here")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch * args.steps, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, len(x)).astype("int32")
    exp = gpk.Experiment(
        model=build_model, data=(x, y), batch_size=args.batch, steps_per_epoch=args.steps,
        progress=False,
    )  # fmt: skip
    plans: list[tuple[str, dict[str, Any]]] = [("single 1", dict(strategy="single", devices=1))]
    for n in args.replicas:
        plans.append((f"data {n}", dict(strategy="data", devices=n, mode="explicit")))
        plans.append((f"multiworker {n}x1", dict(strategy="multiworker", devices=1, workers=n)))
    runs: dict[str, list[gpk.RunResult]] = {name: [] for name, _ in plans}
    print(f"load average at start: {os.getloadavg()}")
    for round_ in range(args.rounds):
        for name, plan in plans:
            result = exp.run(**plan)
            if not result.ok:
                raise SystemExit(f"{name} failed: {result.reason}")
            runs[name].append(result)
        print(f"round {round_ + 1}/{args.rounds} done")
    print(f"load average at end: {os.getloadavg()}\n")
    print(_table(runs, args.replicas))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({k: [r.to_dict() for r in v] for k, v in runs.items()}, out, indent=1)


def _median(results: list[gpk.RunResult], pick) -> float:
    values = [pick(r) for r in results]
    return statistics.median(v for v in values if v is not None)


def _table(runs: dict[str, list[gpk.RunResult]], replicas: list[int]) -> str:
    lines = [
        "| run | step ms | step / data on as many replicas | exposed all-reduce ms "
        "| standalone all-reduce ms |",
        "|---|---|---|---|---|",
    ]
    for name, results in runs.items():
        step = _median(results, lambda r: r.step_time_s)
        n = results[0].devices
        data = runs.get(f"data {n}")
        mw = results[0].strategy == "multiworker"
        ratio = step / _median(data, lambda r: r.step_time_s) if data and mw else None
        exposed = _median(results, lambda r: r.comm_time_s) if n > 1 else None
        alone = (
            _median(results, lambda r: r.extra.get("standalone_all_reduce_s")) if n > 1 else None
        )
        lines.append(
            f"| {name} | {step * 1e3:.2f} | {number_cell(ratio, '{:.2f}')} | "
            f"{number_cell(exposed, '{:.2f}', 1e3)} | {number_cell(alone, '{:.2f}', 1e3)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
