"""The notebooks executed once per test session, with GPK_QUICK=1, each in a fresh kernel.

Three tests need them: `tests/test_notebooks.py` checks that each runs top to bottom,
`tests/notebook/test_browser.py` opens the executed copies in JupyterLab to check that every
table fits its output area, and `tests/test_docs_site.py` renders them into the user guide.
Executing a notebook costs tens of seconds to minutes; doing it once for all three keeps CI's
time where it was. The first ask starts every notebook (or `start()` does, from a test that mostly
waits: `notebooks_started_ahead` in tests/conftest.py), two at a time (a notebook spends much of
its time starting processes, so two share the machine's cores better than one), each in a child
process of its own with its own environment; every ask then waits for its own. A notebook that
raised keeps its error, and every later ask raises it again.

`python -m tests.executed_notebooks NOTEBOOK FOLDER` executes one notebook into FOLDER, as the
session's children do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MEASURED_IN_ROUNDS = {"02_data_parallelism"}  # the notebook on reading a measurement
# Started first, so the longest runs do not come last (CI's time).
LONGEST_FIRST = ("03_model_parallelism", "05_time_to_accuracy", "02_data_parallelism")
AT_ONCE = 2
TIMEOUT_S = 900  # one notebook, cells and kernel start included


class NotebookFailed(RuntimeError):
    """A notebook raised while it ran: the message is its child's output, traceback included."""


class ExecutedNotebooks:
    """`executed(path)` is the path of `path`'s executed copy in `folder` (outputs and widget
    state saved), executed on first ask."""

    def __init__(
        self,
        folder: Path,
        notebooks: list[Path] | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        """`notebooks`: those the session will ask for, all started at the first ask or at
        `start()` (default every notebook). `environment`: each child's (default this
        process's when the child starts); a session passes the one it started with, so what a
        test sets for itself never reaches a notebook started beside it."""
        self.folder = folder
        self.notebooks = NOTEBOOKS if notebooks is None else notebooks
        self.environment = environment
        self._runs: dict[str, Future[str]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._children: set[subprocess.Popen] = set()

    def start(self) -> None:
        """Start every notebook now, without waiting for any: a test that mostly waits (on
        Slurm's clock, say) lends them the machine's idle cores."""
        if not self._runs:
            self._start_all()

    def __call__(self, path: Path) -> Path:
        self.start()
        if path.name not in self._runs:  # a notebook outside the set: on its own
            self._runs[path.name] = self._start(path)
        failure = self._runs[path.name].result()
        if failure:
            raise NotebookFailed(failure)
        return self.folder / path.name

    def _start_all(self) -> None:
        first = [p for name in LONGEST_FIRST for p in self.notebooks if p.stem == name]
        for path in first + [p for p in self.notebooks if p not in first]:
            self._runs[path.name] = self._start(path)

    def _start(self, path: Path) -> Future[str]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(AT_ONCE, thread_name_prefix="notebook")
        return self._pool.submit(self._execute_in_child, path)

    def close(self) -> None:
        """End the session's notebooks: those not started never start, running ones are
        stopped (a session cut short does not wait for them)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for child in list(self._children):
            child.kill()

    def _execute_in_child(self, path: Path) -> str:
        """Execute `path` in a child process; '' when it ran through, else its output."""
        command = [sys.executable, "-m", "tests.executed_notebooks", str(path), str(self.folder)]
        child = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._children.add(child)
        try:
            output, _ = child.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            return f"{path.name} did not finish within {TIMEOUT_S} s"
        finally:
            self._children.discard(child)
        return "" if child.returncode == 0 else f"{path.name} failed:\n{output}"


def execute(path: Path, folder: Path) -> None:
    """Run every cell of `path` in a fresh kernel and write the copy, with its outputs (an error
    included), to `folder / path.name`."""
    import nbformat
    from nbclient import NotebookClient

    work = folder / path.stem
    work.mkdir(parents=True, exist_ok=True)
    notebook = nbformat.read(path, as_version=4)
    # The kernel inherits this process's environment: quick mode, and a run log of its own.
    os.environ.update({"GPK_QUICK": "1", "GPK_LOG": str(work / "gpk_runs.sqlite")})
    # The notebooks that teach how to read a measurement run as a user runs them, in quick
    # mode's rounds; the others once per configuration, for CI's time.
    if path.stem in MEASURED_IN_ROUNDS:
        os.environ.pop("GPK_ROUNDS", None)
    else:
        os.environ["GPK_ROUNDS"] = "1"
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}
    )
    try:
        client.execute()
    finally:
        nbformat.write(notebook, folder / path.name)


if __name__ == "__main__":
    execute(Path(sys.argv[1]), Path(sys.argv[2]))
