"""Each lab notebook's run time and the rows its tables cannot tell, before and after a change.

A student runs a notebook top to bottom in a fresh kernel; this does the same, with nbclient,
for the notebooks given, from two trees: this one and an earlier commit checked out in a
worktree (`--before`, e.g. the commit before a change to how long the kit measures). The kernel
imports the package of the tree its notebook came from. The two trees alternate notebook by
notebook, so the machine's drift hits both. For each run it prints the wall time and, for every
table the notebook shows, how many of its rows read "too few steps to tell".

    python benchmarks/notebook_times.py --before d5d34fd --full 00_quickstart 02_data_parallelism
    python benchmarks/notebook_times.py --before d5d34fd 06_tensor_parallelism   # quick mode

Run it on a quiet machine: every figure is a wall time.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import nbclient
import nbformat
from text_cells import load_average

ROOT = pathlib.Path(__file__).resolve().parent.parent
CANNOT_TELL = "too few steps to tell"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", help="notebooks of notebooks/, without .ipynb")
    parser.add_argument("--before", required=True, help="the earlier commit to compare with")
    parser.add_argument("--full", action="store_true", help="as a student runs them (no GPK_QUICK)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each notebook per tree")
    args = parser.parse_args(argv)
    mode = "full" if args.full else "quick"
    print(f"load average {load_average()}, {os.cpu_count()} cores; {mode} mode")
    with tempfile.TemporaryDirectory(prefix="gpk-notebooks-") as scratch:
        before = pathlib.Path(scratch) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(before), args.before],
            cwd=ROOT,
            check=True,
        )
        try:
            trees = {"before": before, "after": ROOT}
            print("| notebook | tree | time (s) | rows that cannot tell, per table |")
            print("|---|---|---|---|")
            for name in args.notebooks:
                for _ in range(args.rounds):
                    for label, tree in trees.items():
                        seconds, rows = _run(tree, name, args.full, pathlib.Path(scratch))
                        cells = ", ".join(str(r) for r in rows) or "no table"
                        print(f"| {name} | {label} | {seconds:.0f} | {cells} |", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT)
    print(f"load average {load_average()}")
    return 0


def _run(tree: pathlib.Path, name: str, full: bool, scratch: pathlib.Path) -> tuple[float, list]:
    """The notebook of `tree` run in a fresh kernel and folder that import `tree`'s package:
    (its wall time, each table's rows that cannot tell)."""
    notebook = nbformat.read(tree / "notebooks" / f"{name}.ipynb", as_version=4)
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch))
    kept = dict(os.environ)
    os.environ.update({"PYTHONPATH": str(tree), "GPK_LOG": str(work / "gpk_runs.sqlite")})
    os.environ.pop("GPK_ROUNDS", None)
    if full:
        os.environ.pop("GPK_QUICK", None)
    else:
        os.environ["GPK_QUICK"] = "1"
    client = nbclient.NotebookClient(
        notebook, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(work)}}
    )
    started = time.perf_counter()
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(kept)
    return time.perf_counter() - started, _cannot_tell(notebook)


def _cannot_tell(notebook: nbformat.NotebookNode) -> list[int]:
    """For each table among the outputs (an HTML table), its rows that cannot tell."""
    rows = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            html = output.get("data", {}).get("text/html", "")
            html = "".join(html) if isinstance(html, list) else html
            for table in html.split("<table")[1:]:
                rows.append(
                    sum(CANNOT_TELL in row for row in table.split("</table>")[0].split("<tr"))
                )
    return rows


if __name__ == "__main__":
    sys.exit(main())
