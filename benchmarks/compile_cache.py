"""What JAX's persistent compilation cache saves a lab reopened in a fresh kernel.

A notebook runs twice in a row, each time in a fresh kernel and in the same folder, as a student
reopens a lab: once with the kit's cache in a new, empty folder (`GPK_JAX_CACHE`; the second run
finds the first one's programs there), once with it off (`GPK_JAX_CACHE=off`). The two pairs
alternate, so the machine's drift hits both. The figure is the second run's time, with the cache
against without, per cell and in all; the first runs show what filling the cache costs.

    python benchmarks/compile_cache.py --rounds 2
    python benchmarks/compile_cache.py --notebook 06_tensor_parallelism --rounds 1
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from typing import Any

import nbclient
import nbformat
from text_cells import load_average

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", default="00_quickstart", help="a notebook of notebooks/")
    parser.add_argument("--rounds", type=int, default=2, help="pairs of each kind, alternated")
    parser.add_argument("--full", action="store_true", help="without GPK_QUICK=1")
    args = parser.parse_args(argv)
    path = ROOT / "notebooks" / f"{args.notebook}.ipynb"
    print(
        f"load average {load_average()}, {os.cpu_count()} cores; {path.name}, quick={not args.full}"
    )
    figures: dict[str, list[dict[str, Any]]] = {"cache": [], "off": []}
    for index in range(args.rounds):
        for kind in ("cache", "off"):
            pair = _pair(path, kind, quick=not args.full)
            figures[kind].append(pair)
            print(
                f"round {index} {kind:<5}: first {pair['first'][0]:6.1f} s, "
                f"second {pair['second'][0]:6.1f} s",
                flush=True,
            )
    _summarise(figures)
    print(f"load average {load_average()}")
    return 0


def _pair(path: pathlib.Path, kind: str, quick: bool) -> dict[str, Any]:
    """The notebook twice in fresh kernels, in one new folder, with the cache in a new folder
    or off."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="gpk_cache_bench_"))
    cache = folder / "jax-cache"
    env = {"GPK_JAX_CACHE": str(cache) if kind == "cache" else "off"}
    if quick:
        env.update(GPK_QUICK="1", GPK_ROUNDS="1")
    try:
        first = _execute(path, folder, env)
        second = _execute(path, folder, env)
        files = len(list(cache.iterdir())) if cache.is_dir() else 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"first": first, "second": second, "cached_programs": files}


def _execute(path: pathlib.Path, folder: pathlib.Path, env: dict[str, str]) -> tuple[float, list]:
    """Run the notebook in a fresh kernel in `folder`: its wall time and each code cell's."""
    notebook = nbformat.read(path, as_version=4)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client = nbclient.NotebookClient(
            notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": folder}}
        )
        began = time.perf_counter()
        client.execute()
        total = time.perf_counter() - began
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    cells = [_cell_seconds(cell) for cell in notebook.cells if cell.cell_type == "code"]
    return total, cells


def _cell_seconds(cell: Any) -> float:
    timing = cell.metadata.get("execution", {})
    began, ended = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not began or not ended:
        return float("nan")
    return (_stamp(ended) - _stamp(began)).total_seconds()


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _summarise(figures: dict[str, list[dict[str, Any]]]) -> None:
    cache, off = figures["cache"], figures["off"]
    second_cache = statistics.median(p["second"][0] for p in cache)
    second_off = statistics.median(p["second"][0] for p in off)
    first_cache = statistics.median(p["first"][0] for p in cache)
    first_off = statistics.median(p["first"][0] for p in off)
    saved = [o["second"][0] - c["second"][0] for c, o in zip(cache, off, strict=True)]
    print(
        f"\nreopened (second run), median: cache {second_cache:.1f} s, off {second_off:.1f} s: "
        f"saves {second_off - second_cache:.1f} s (per round {', '.join(f'{s:.1f}' for s in saved)}"
        f" s); first run: cache {first_cache:.1f} s, off {first_off:.1f} s; programs cached: "
        f"{statistics.median(p['cached_programs'] for p in cache):.0f}"
    )
    if not any(p["cached_programs"] for p in cache):
        print(
            "no JAX program was compiled: the notebook ran on TensorFlow (the default backend "
            "where it is installed) and projected nothing, so the cache has nothing to keep"
        )
    print("per cell, second run (median s): cell  cache  off")
    cells = len(cache[0]["second"][1])
    for index in range(cells):
        with_cache = statistics.median(p["second"][1][index] for p in cache)
        without = statistics.median(p["second"][1][index] for p in off)
        print(f"  {index:>4}  {with_cache:5.1f}  {without:5.1f}")


if __name__ == "__main__":
    sys.exit(main())
