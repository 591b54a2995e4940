"""The cost model held against the runs it predicts: for the lab's models on this machine,
each strategy's measured step beside the step a calibration of the same devices predicts.

For each model, `gpk.calibrate(model=...)` measures the devices (and times the model's own step)
once; then `compare(..., calibration=...)` runs every strategy, and each row carries
`predicted_step_time_s`. The table prints both per row, `predicted ÷ measured` and, where it
leaves 0.85-1.15, the part furthest off; the summary gives the ratio's median and range over the
rows the issue names (single, data ×2 ×4, fsdp ×2, tensor ×2, pipeline gpipe ×2 ×4 on JAX;
single, data and pipeline on TensorFlow). Timing: run it on a quiet machine.

    python benchmarks/calibrated_predictions.py                       # JAX, mlp cnn transformer
    python benchmarks/calibrated_predictions.py --backend tensorflow --model mlp
    python benchmarks/calibrated_predictions.py --plot predicted.png --json predicted.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

STRATEGIES = {
    "jax": ["single", "data", "fsdp", "tensor", "pipeline"],
    "tensorflow": ["single", "data", "pipeline"],
}
# The rows a target is checked on: (strategy, devices).
NAMED = {
    "jax": {
        ("single", 1),
        ("data", 2),
        ("data", 4),
        ("fsdp", 2),
        ("tensor", 2),
        ("pipeline", 2),
        ("pipeline", 4),
    },
    "tensorflow": {("single", 1), ("data", 2), ("data", 4), ("pipeline", 2), ("pipeline", 4)},
}
COLUMNS = [
    "strategy",
    "devices",
    "step_time_s",
    "predicted_step_time_s",
    "predicted_over_measured",
    "predicted_off_in",
]


def measure(backend: str, models: list[str], rounds: int | None) -> list[dict[str, object]]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import gpu_parallel_kit as gpk

    rows: list[dict[str, object]] = []
    for model in models:
        started = time.perf_counter()
        calibration = gpk.calibrate(backend=backend, model=model, progress=False)
        took = time.perf_counter() - started
        print(f"{model}: calibrated in {took:.0f} s ({calibration.probe_s:.0f} s probing)")
        experiment = gpk.Experiment(model=model, backend=backend, progress=False)
        compared = experiment.compare(
            STRATEGIES[backend],
            devices=[1, 2, 4],
            rounds=rounds,
            calibration=calibration,
            schedule="gpipe",
            micro_batches=4,
        )
        table = compared.table
        for result, (_, row) in zip(compared.results, table[COLUMNS].iterrows(), strict=True):
            rows.append(
                {
                    "model": model,
                    **{c: row[c] for c in COLUMNS},
                    "parts": result.extra.get("predicted", {}),
                    "measured_parts": {
                        "comm_time_s": result.comm_time_s,
                        "bubble_fraction": result.extra.get("bubble_fraction"),
                    },
                    "named": (row["strategy"], int(row["devices"])) in NAMED[backend],
                    "calibrate_s": took,
                }
            )
    return rows


def summary(rows: list[dict[str, object]]) -> str:
    ratios = [float(r["predicted_over_measured"]) for r in rows if r["named"]]
    ratios = [r for r in ratios if r == r]
    if not ratios:
        return "no row was predicted"
    inside = sum(0.7 <= r <= 1.4 for r in ratios)
    return (
        f"predicted ÷ measured over {len(ratios)} named rows: median "
        f"{statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}, "
        f"{inside} of {len(ratios)} within 0.7-1.4"
    )


def plot(rows: list[dict[str, object]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpu_parallel_kit.plots.style import plain_log_ticks

    figure, ax = plt.subplots(figsize=(6, 5), layout="constrained")
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [
            r
            for r in rows
            if r["model"] == model and r["predicted_step_time_s"] == r["predicted_step_time_s"]
        ]
        ax.scatter(
            [1e3 * float(r["step_time_s"]) for r in mine],
            [1e3 * float(r["predicted_step_time_s"]) for r in mine],
            label=str(model),
        )
    low = min(1e3 * float(r["step_time_s"]) for r in rows) * 0.7
    high = max(1e3 * float(r["step_time_s"]) for r in rows) * 1.4
    ax.plot([low, high], [low, high], color="0.3", lw=1, label="predicted = measured")
    ax.fill_between(
        [low, high], [0.7 * low, 0.7 * high], [1.4 * low, 1.4 * high], color="0.9", zorder=0
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax)  # "2", "20": milliseconds read as numbers, as the kit's own plots
    ax.set_xlabel("measured step (ms)")
    ax.set_ylabel("predicted step (ms)")
    ax.set_title("Calibrated prediction against measurement\n(shaded: within 0.7-1.4)")
    ax.legend()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="jax", choices=sorted(STRATEGIES))
    parser.add_argument("--model", nargs="+", default=["mlp", "cnn", "transformer"])
    parser.add_argument(
        "--rounds", type=int, default=None, help="fixed rounds; default: until known"
    )
    parser.add_argument("--plot", default=None, help="write the predicted-against-measured plot")
    parser.add_argument("--json", default=None, help="write the rows as JSON")
    parser.add_argument("--replot", default=None, help="draw the plot of a JSON written before")
    args = parser.parse_args()
    if args.replot:
        plot(json.loads(Path(args.replot).read_text()), args.plot or "predicted.png")
        return
    rows = measure(args.backend, args.model, args.rounds)
    print()
    print("| model | strategy | devices | measured ms | predicted ms | pred ÷ meas | off in |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['strategy']} | {r['devices']} | "
            f"{1e3 * float(r['step_time_s']):.3g} | "
            f"{1e3 * float(r['predicted_step_time_s']):.3g} | "
            f"{float(r['predicted_over_measured']):.3f} | {r['predicted_off_in'] or ''} |"
        )
    print()
    print(summary(rows))
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
