"""How soon the first result comes: from the cell that asks for it, in a fresh kernel.

A fresh interpreter stands in for a notebook kernel. It loads the kit as a notebook does
(`%load_ext gpu_parallel_kit` starts the default backend's server in the background; the first
`Experiment(...)` starts its own backend's), then waits `--think` seconds as a user writing the
next cell would, then times `exp.run(...)` from the call to its row: the figure a user feels.
With `GPK_WARM=0` the same, without servers started ahead (the kit's behaviour before warming).
Then `gpk demo`'s wall time, the whole command. Each figure `--repeat` times, both settings
alternated, median and range printed.

    python benchmarks/first_result.py                       # TensorFlow and JAX, warm and cold
    python benchmarks/first_result.py --backend jax --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from text_cells import load_average

KERNEL = r"""
import json, sys, time
began = time.perf_counter()
import gpu_parallel_kit as gpk
from IPython.testing.globalipapp import get_ipython  # a real shell, as a kernel has
gpk.load_ipython_extension(get_ipython())
exp = gpk.Experiment(model="mlp", data="tabular", samples=2048, batch_size=256,
                     backend=sys.argv[1], progress=False, log=sys.argv[3])
time.sleep(float(sys.argv[2]))  # the user writes the next cell
asked = time.perf_counter()
result = exp.run("single")
print(json.dumps({"status": result.status, "first_result_s": time.perf_counter() - asked,
                  "loaded_s": asked - began - float(sys.argv[2])}))
"""


def first_result(backend: str, think_s: float, warm: bool, folder: str) -> dict:
    env = {**os.environ, "GPK_WARM": "1" if warm else "0"}
    log = os.path.join(folder, f"runs-{time.monotonic_ns()}.sqlite")
    done = subprocess.run(
        [sys.executable, "-c", KERNEL, backend, str(think_s), log],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the kernel stand-in failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def demo_wall_s(folder: str, backend: str | None = None) -> float:
    """`gpk demo`'s wall time as after install: a folder and run log of its own, so the step is
    counted for the projection; on `backend`, else on the demo's own choice."""
    fresh = tempfile.mkdtemp(prefix="demo_", dir=folder)
    command = [os.path.join(os.path.dirname(sys.executable), "gpk"), "demo", "--no-progress"]
    command += ["--out", os.path.join(fresh, "report"), "--log", os.path.join(fresh, "runs.db")]
    command += ["--backend", backend] if backend else []
    began = time.perf_counter()
    subprocess.run(command, capture_output=True, text=True, timeout=600, check=True, cwd=fresh)
    return time.perf_counter() - began


def _summary(values: list[float]) -> str:
    return f"{statistics.median(values):5.2f} s (range {min(values):.2f}–{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", nargs="+", default=["tensorflow", "jax"])
    parser.add_argument("--think", type=float, default=5.0, help="seconds between the cells")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-demo", dest="demo", action="store_false")
    parser.add_argument("--json", help="also write the raw figures here")
    args = parser.parse_args()
    print(f"load average {load_average()}; {os.cpu_count()} cores")
    report: dict = {}
    with tempfile.TemporaryDirectory(prefix="gpk_first_") as folder:
        for backend in args.backend:
            rows: dict[str, list[float]] = {"warm": [], "cold": []}
            for _ in range(args.repeat):
                for setting in ("warm", "cold"):  # alternated: drift hits both
                    row = first_result(backend, args.think, setting == "warm", folder)
                    if row["status"] != "ok":
                        raise SystemExit(f"{backend} run {row['status']}")
                    rows[setting].append(row["first_result_s"])
            report[backend] = rows
            for setting, values in rows.items():
                print(
                    f"{backend:<10} first result, {setting} servers "
                    f"({args.think:g} s after loading): {_summary(values)}"
                )
        if args.demo:
            walls = [demo_wall_s(folder) for _ in range(args.repeat)]
            report["demo_wall_s"] = walls
            print(f"gpk demo, whole command:                           {_summary(walls)}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
