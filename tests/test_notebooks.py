"""Every notebook runs top to bottom in a fresh kernel with GPK_QUICK=1, with no stderr output.

The executed copies are kept for the session (the `executed_notebooks` fixture): the browser test
opens them in JupyterLab rather than running every notebook again.
"""

from __future__ import annotations

import nbformat
import pytest

from tests.executed_notebooks import NOTEBOOKS


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, executed_notebooks):
    notebook = nbformat.read(executed_notebooks(path), as_version=4)
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # What JupyterLab shows as a stderr box (tests/notebook/test_browser.py looks at it there).
    stderr = [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert not stderr, stderr
    assert any("image/png" in o.get("data", {}) for o in outputs), "the comparison plot is missing"
