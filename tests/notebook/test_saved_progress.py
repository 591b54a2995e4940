"""A run's progress bar saved in a notebook: drawn as a widget while the run goes on, and left as
its last line of text, which any viewer shows without a kernel (the guide's pages, JupyterLab
before a run)."""

from __future__ import annotations

import nbformat
from nbclient import NotebookClient

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
CELL = """\
from gpu_parallel_kit.runs.processes.progress_bars import run_progress
from gpu_parallel_kit.runs.results.run_result import RunResult

def ran(label, **row):
    progress = run_progress(label)
    progress({"event": "phase", "phase": "building the model"})
    progress({"event": "phase", "phase": "training", "total": 4, "startup_s": 0.5})
    for step in range(1, 5):
        progress({"event": "progress", "step": step, "total": 4, "step_time_s": 0.004})
    identity = dict(run_id=label, experiment_id="e", strategy="data", devices=2, virtual=True)
    progress.close(RunResult(**identity, **row))

ran("data×2 (virtual)", status="ok", step_time_s=0.0042)
ran("data×4 (virtual)", status="oom", reason="need 21.5 MiB on /cpu:0; raise memory_budget")
"""


def test_a_saved_progress_bar_is_a_line_of_text_not_a_widget(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()
    outputs = notebook.cells[0].outputs
    assert not [out for out in outputs if WIDGET_VIEW in out.get("data", {})], outputs
    lines = [out["data"]["text/plain"] for out in outputs if "text/plain" in out.get("data", {})]
    assert lines[0].startswith("data×2 (virtual): ok · median step 4.2 ms · start-up 0.")
    assert lines[1] == "data×4 (virtual): oom"
    printed = "".join(out.get("text", "") for out in outputs if out["output_type"] == "stream")
    assert "data×4 (virtual) oom: need 21.5 MiB on /cpu:0; raise memory_budget" in printed
