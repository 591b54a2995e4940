"""The notebooks executed once per test session, with GPK_QUICK=1, each in a fresh kernel.

Two tests need them: `tests/test_notebooks.py` checks that each runs top to bottom, and
`tests/notebook/test_browser.py` opens the executed copies in JupyterLab to check that every
table fits its output area. Executing a notebook costs tens of seconds to minutes; doing it once
for both keeps CI's time where it was. Whichever test asks first executes; the other reads the
copy. A notebook that raised keeps its error, and every later ask raises it again.
"""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
MEASURED_IN_ROUNDS = {"02_data_parallelism"}  # the notebook on reading a measurement


class ExecutedNotebooks:
    """`executed(path)` is the path of `path`'s executed copy in `folder` (outputs and widget
    state saved), executed on first ask."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._done: dict[str, Path | BaseException] = {}

    def __call__(self, path: Path) -> Path:
        if path.name not in self._done:
            self._done[path.name] = self._execute(path)
        done = self._done[path.name]
        if isinstance(done, BaseException):
            raise done
        return done

    def _execute(self, path: Path) -> Path | BaseException:
        work = self.folder / path.stem
        work.mkdir(parents=True, exist_ok=True)
        notebook = nbformat.read(path, as_version=4)
        # The kernel inherits this process's environment: quick mode, and a run log of its own.
        quick = {"GPK_QUICK": "1", "GPK_LOG": str(work / "gpk_runs.sqlite")}
        try:
            with mock.patch.dict(os.environ, quick):
                # The notebooks that teach how to read a measurement run as a user runs them, in
                # quick mode's rounds; the others once per configuration, for CI's time.
                if path.stem in MEASURED_IN_ROUNDS:
                    os.environ.pop("GPK_ROUNDS", None)
                else:
                    os.environ["GPK_ROUNDS"] = "1"
                NotebookClient(
                    notebook,
                    timeout=300,
                    kernel_name="python3",
                    resources={"metadata": {"path": str(work)}},
                ).execute()
        except Exception as error:  # noqa: BLE001 - kept, and raised to every test that asks
            return error
        finally:
            nbformat.write(notebook, self.folder / path.name)
        return self.folder / path.name
