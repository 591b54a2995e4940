"""Does `data` on one device differ from `single`, once measured in interleaved rounds?

Both train the same model on the same batches on one device; they differ only in their code
path (TensorFlow: MirroredStrategy over one device against OneDeviceStrategy; JAX:
keras.distribution.DataParallel over a one-device mesh against no distribution). Each backend's
comparison runs in interleaved rounds, so the machine's drift hits both alike; the speedup of
`data`×1 over `single` comes with its 95 % interval (rounds paired). An interval that holds 1
means no systematic difference this measurement can show.

    python benchmarks/baseline.py --rounds 5 --backend tensorflow jax
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import gpu_parallel_kit as gpk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", nargs="+", default=["tensorflow", "jax"])
    parser.add_argument("--model", default="mlp", help="a built-in model")
    parser.add_argument("--steps", type=int, default=24, help="steps per run")
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args(argv)
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="gpk_baseline_") as folder:
        for backend in args.backend:
            exp = gpk.Experiment(
                model=args.model,
                batch_size=args.batch,
                epochs=1,
                steps_per_epoch=args.steps,
                backend=backend,
                progress=False,
                log=os.path.join(folder, "runs.sqlite"),
            )
            comparison = exp.compare(["single", "data"], [1, 2], rounds=args.rounds)
            table = comparison.table
            for (_, row), result in zip(table.iterrows(), comparison.results, strict=True):
                medians = " ".join(f"{1e3 * s:.2f}" for s in result.extra["round_step_time_s"])
                print(
                    f"{backend:<10} {row['strategy']}×{row['devices']}: step "
                    f"{row['step_time_s'] * 1e3:.2f} ms ({row['step_time_ci_low_s'] * 1e3:.2f}–"
                    f"{row['step_time_ci_high_s'] * 1e3:.2f}), speedup {row['speedup']:.3f} "
                    f"({row['speedup_ci_low']:.3f}–{row['speedup_ci_high']:.3f}); "
                    f"rounds' medians {medians} ms; steps/execution "
                    f"{result.extra['tuned'].get('steps_per_execution')}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
