"""Build the user guide: `python docs/build.py` (add `--serve` to look at it on localhost).

The site renders the lab's notebooks with their outputs, so they must have been executed. CI's
test (`tests/test_docs_site.py`) hands over the copies `tests/test_notebooks.py` executed, so the
notebooks run once per CI run. By hand, without `--executed`, this script executes them itself in
quick mode (a few minutes; the copies are kept in `build/executed_notebooks` and executed again
only when their notebook changes), or `--unexecuted` renders them without outputs for a fast look
at the text. Sources are staged in a scratch folder, so the checkout stays as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the notebooks' executor is the tests' own
from tests.executed_notebooks import NOTEBOOKS  # noqa: E402

DOCS = ROOT / "docs"
# What the pages read from outside docs/: the benchmarks page includes this file.
INCLUDED = [ROOT / "benchmarks" / "README.md"]


def stage(folder: Path, notebooks: Iterable[Path]) -> Path:
    """Copy the pages, the files they include and the notebooks (into `lab/`) under `folder`,
    keeping their places relative to each other; returns the staged docs folder."""
    source = folder / "docs"
    shutil.copytree(
        DOCS, source, ignore=shutil.ignore_patterns("_build", "__pycache__")
    )
    for path in INCLUDED:
        target = folder / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    lab = source / "lab"
    lab.mkdir(exist_ok=True)
    for notebook in notebooks:
        shutil.copy2(notebook, lab / notebook.name)
    return source


def build(out: Path, notebooks: Iterable[Path]) -> Path:
    """Build the site strictly into `out` (a warning is an error); returns `out/index.html`.

    Raises `SystemExit` with Sphinx's status when the build warns or fails."""
    from sphinx.cmd.build import build_main

    with tempfile.TemporaryDirectory(prefix="gpk-docs-") as scratch:
        source = stage(Path(scratch), notebooks)
        status = build_main(
            [
                "-W",
                "--keep-going",
                "-q",
                "-b",
                "html",
                "-d",
                str(Path(scratch) / "doctrees"),
                str(source),
                str(out),
            ]
        )
    if status:
        raise SystemExit(
            f"the docs build failed with status {status}; its warnings are above"
        )
    return out / "index.html"


def executed_in_quick_mode(folder: Path) -> list[Path]:
    """Every notebook executed in quick mode, as CI's tests execute them, into `folder`; a copy
    newer than its notebook is kept from an earlier build."""
    from tests.executed_notebooks import ExecutedNotebooks, NotebookFailed

    copies = [folder / path.name for path in NOTEBOOKS]
    stale = [
        path
        for path, copy in zip(NOTEBOOKS, copies, strict=True)
        if not copy.exists() or copy.stat().st_mtime < path.stat().st_mtime
    ]
    executed = ExecutedNotebooks(folder, stale)
    try:
        if stale:
            print(
                f"executing {len(stale)} notebooks in quick mode, two at a time",
                flush=True,
            )
        for number, path in enumerate(stale, 1):
            try:
                executed(path)
            except NotebookFailed as failed:
                # No copy is left, so the next build executes it again.
                (folder / path.name).unlink(missing_ok=True)
                raise SystemExit(str(failed)) from None
            print(f"executed {path.name} ({number}/{len(stale)})", flush=True)
    finally:
        executed.close()
    return copies


def serve(folder: Path, port: int) -> None:
    handler: Callable = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=folder
    )
    with http.server.ThreadingHTTPServer(
        ("127.0.0.1", port), handler
    ) as server:
        print(
            f"serving the docs at http://127.0.0.1:{port}/ (Ctrl-C stops)",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "build" / "site",
        help="output folder",
    )
    given = parser.add_mutually_exclusive_group()
    given.add_argument(
        "--executed",
        type=Path,
        metavar="DIR",
        help="a folder of executed notebook copies",
    )
    given.add_argument(
        "--unexecuted",
        action="store_true",
        help="render the notebooks without outputs (fast)",
    )
    parser.add_argument(
        "--serve", action="store_true", help="serve the site once built"
    )
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    if args.unexecuted:
        notebooks = NOTEBOOKS
    elif args.executed:
        notebooks = [args.executed / path.name for path in NOTEBOOKS]
        missing = [path.name for path in notebooks if not path.exists()]
        if missing:
            parser.error(
                f"{args.executed} has no executed copy of {', '.join(missing)}"
            )
    else:
        notebooks = executed_in_quick_mode(
            ROOT / "build" / "executed_notebooks"
        )
    index = build(args.out, notebooks)
    print(f"built {index}", flush=True)
    if args.serve:
        serve(args.out, args.port)


if __name__ == "__main__":
    main()
