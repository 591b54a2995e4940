"""One command that measures the kit on a machine with NVIDIA GPUs, with JAX alone if need be.

    pip install -e ".[jax]" && pip install "jax[cuda13]"      # no TensorFlow needed
    python benchmarks/gpu_check.py                          # table, and gpu_check.json

For each built-in model (mlp, cnn, transformer): `single` on one GPU, then `data` and `tensor` on
every GPU there is (left out, with a sentence, on a one-GPU machine); on JAX, and on TensorFlow
too where TensorFlow's GPU build is installed. It prints the comparison table and writes every
row, with the machine's devices and versions, to a JSON file. A few steps per run keep it under
five minutes on one GPU.

Without a GPU it says so and stops; `--allow-cpu` runs the same plan on host devices instead (a
check that the script works, not a GPU figure: every row then says cpu).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import platform
import sys
import time

import gpu_parallel_kit as gpk
from gpu_parallel_kit.analysis.tables import format_table
from gpu_parallel_kit.runs.devices import discover_physical_devices

MODELS = {"mlp": "tabular", "cnn": "images", "transformer": "tokens"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="gpu_check.json", help="JSON file for every row")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per run")
    parser.add_argument("--batch-size", type=int, default=256, help="global batch")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument(
        "--allow-cpu", action="store_true", help="without GPUs, run on 2 host devices instead"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    backends = ["jax"] + (["tensorflow"] if _has_tensorflow_gpu() else [])
    gpus = [d for d in discover_physical_devices("jax") if d.kind == "gpu"]
    if not gpus and not args.allow_cpu:
        print(
            "JAX sees no GPU here (is JAX's CUDA build installed? pip install 'jax[cuda13]'); "
            "nothing to measure. --allow-cpu runs the same plan on host devices.",
            file=sys.stderr,
        )
        return 1
    count = len(gpus) if gpus else 2
    strategies = ["single", "data", "tensor"] if count > 1 else ["single"]
    if count == 1:
        print("one GPU: data and tensor need two or more, so only single runs", file=sys.stderr)
    if "tensorflow" not in backends:
        print("TensorFlow's GPU build is not installed: JAX rows only", file=sys.stderr)
    rows = []
    for name in args.models:
        experiment = gpk.Experiment(
            name, MODELS[name], batch_size=args.batch_size, steps_per_epoch=args.steps
        )
        # `single` runs on one device, the others on every device: compare adds the baseline.
        comparison = experiment.compare(strategies, [count], backend=backends)
        print(f"\n{name}\n{format_table(comparison.table)}")
        for result in comparison.results:
            rows.append({"model": name, **result.to_dict()})
    report = {
        "machine": {
            "python": platform.python_version(),
            "gpus": [{"name": g.description, "memory_bytes": g.memory_bytes} for g in gpus],
            "backends": backends,
        },
        "seconds": time.perf_counter() - started,
        "rows": rows,
    }
    pathlib.Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print(f"\n{len(rows)} rows in {report['seconds']:.0f} s, written to {args.out}")
    return 0


def _has_tensorflow_gpu() -> bool:
    """TensorFlow with a GPU it can see, asked through the kit's own discovery (in a worker)."""
    if importlib.util.find_spec("tensorflow") is None:
        return False
    return any(d.kind == "gpu" for d in discover_physical_devices("tensorflow"))


if __name__ == "__main__":
    raise SystemExit(main())
