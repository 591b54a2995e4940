"""The user guide builds strictly (`docs/build.py`: a warning fails it), with every notebook
rendered from the copy `tests/test_notebooks.py` executed, and the API reference read from the
public API's docstrings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.executed_notebooks import NOTEBOOKS

ROOT = Path(__file__).parent.parent
PUBLIC = ["Experiment", "Comparison", "RunResult", "list_devices", "history", "plan_memory"]


@pytest.mark.slow
@pytest.mark.after_notebooks
def test_the_site_builds_strictly_with_the_lab_rendered_and_the_api_present(
    executed_notebooks, tmp_path
):
    folder = {executed_notebooks(path).parent for path in NOTEBOOKS}.pop()
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "build.py"), "--executed", str(folder)]
        + ["--out", str(site)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    for path in NOTEBOOKS:
        page = (site / "lab" / f"{path.stem}.html").read_text()
        assert "<img" in page, f"{path.name} is rendered without its figures"
    api = (site / "api.html").read_text()
    missing = [name for name in PUBLIC if f'id="gpu_parallel_kit.{name}"' not in api]
    assert not missing, f"the API reference lacks {missing}"
