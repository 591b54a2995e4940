"""A run's progress bar saved in a notebook: drawn as a widget while the run goes on, and left as
its last line of text, which any viewer shows without a kernel (the guide's pages, JupyterLab
before a run). A comparison's lines, one per configuration, are one output updated in place."""

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


ROUNDS_CELL = """\
from gpu_parallel_kit.runs.processes.configuration_lines import RoundsSoFar, configuration_lines
from gpu_parallel_kit.runs.results.run_result import RunResult

lines = configuration_lines(["single×1", "data×4 (virtual)"])
for turn in (1, 2, 3):
    for index, status in enumerate(("ok", "oom")):
        line = lines.line(index)
        line({"event": "round", "round": turn})
        line({"event": "phase", "phase": "training", "total": 4})
        for step in range(1, 5):
            line({"event": "progress", "step": step, "total": 4, "step_time_s": 0.004})
        identity = dict(run_id=str(turn), experiment_id="e", strategy="data", devices=4)
        identity["virtual"] = True
        line.close(RunResult(**identity, status=status, reason="" if status == "ok" else "no room"))
        step = (0.0042, 0.004, 0.0045) if status == "ok" else (None, None, None)
        ended = ("known" if status == "ok" else "a round failed") if turn == 3 else ""
        line.measured(RoundsSoFar(str(index), turn, *step, ended=ended))
lines.close()
"""


def test_a_saved_comparison_keeps_one_line_per_configuration(tmp_path):
    """Three rounds of two configurations leave one output of two lines, their last."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(ROUNDS_CELL)])
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()
    (output,) = notebook.cells[0].outputs
    assert output["data"]["text/plain"].splitlines() == [
        "single×1:         ok · 3 rounds · median step 4.2 ms (4–4.5) · known",
        "data×4 (virtual): oom: no room",
    ]
