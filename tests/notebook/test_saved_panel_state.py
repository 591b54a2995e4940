"""The panel's state saved with its notebook: the strategy options and the plan tab's inputs and
answer are widget state, as the earlier controls are, so a notebook saved with the panel shows
them without a kernel. The plan search's counting child is stood in for in the cell."""

from __future__ import annotations

import json

import nbformat
from nbclient import NotebookClient

STATE = "application/vnd.jupyter.widget-state+json"
CELL = """\
import pandas as pd

from gpu_parallel_kit.notebook.panel import Panel
from gpu_parallel_kit.options.request import Request
from gpu_parallel_kit.planning import step_count

step_count._count_in_child = lambda *args: {
    "flops": 4.7e7, "parameters": 218_496, "kept_bytes": 1.2e6, "by_layer": {},
    "structure": {"blocks": 4, "hidden": 64, "heads": 4, "block_names": [], "found_in": "x"},
}
devices = pd.DataFrame([
    dict(index=i, name=f"/cpu:{i}", kind="cpu", description="virtual device", memory_bytes=None,
         virtual=True, physical="/physical_device:CPU:0")
    for i in range(4)
])
panel = Panel(Request(model="mlp"), devices=devices, partitions=[])
for name, box in panel.controls.strategies.items():
    box.value = name == "tensor"
panel.controls.strategy_options.controls["mesh"].widget.value = (2, 2)
tab = panel.plan_tab
tab.nodes.value, tab.global_batch.value = 4, 64
tab.search()
assert tab.wait(60), tab.status.value
panel.show()
"""


def test_the_strategy_options_and_the_plan_tab_are_saved_widget_state(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path / "cache"))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": tmp_path}},
        store_widget_state=True,
    )
    client.execute()
    saved = notebook.metadata["widgets"][STATE]["state"]
    models = list(saved.values())
    states = [m["state"] for m in models]
    described = {(s.get("description"), json.dumps(s.get("value"))) for s in states}
    (mesh,) = [s for s in states if s.get("description") == "mesh"]
    assert mesh["_options_labels"][mesh["index"]] == "2x2"  # a dropdown keeps its entry
    assert ("nodes", "4") in described and ("global batch", "64") in described
    shown = json.dumps([s.get("outputs") for s in states if s.get("outputs")])
    assert "Plans for mlp" in shown and "<table" in shown  # the ranked table, without a kernel
    assert "image/png" in shown  # the plot
    assert any(s.get("description") == "run here" for s in states)
