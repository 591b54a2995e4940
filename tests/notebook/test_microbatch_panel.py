"""The panel's "auto" box beside the micro-batch count."""

from __future__ import annotations

from gpu_parallel_kit.notebook.controls import default_schedule
from gpu_parallel_kit.options.request import Request
from tests import builders


def test_the_panel_ticks_auto(shell, device_table):
    from gpu_parallel_kit.notebook.panel import Panel

    x, y = builders.small_data()
    request = Request(model=builders.small_mlp, data=(x, y), batch_size=32, steps_per_epoch=3)
    controls = Panel(request, devices=device_table).controls
    controls.strategies["pipeline"].value = True
    controls.micro_batches.value = 4
    assert controls.plan("run").request.plan()["micro_batches"] == 4
    controls.schedule.value = "naive"
    controls.auto_micro_batches.value = True
    assert controls.micro_batches.disabled
    assert controls.schedule.value == "gpipe"  # naive has no M to choose
    assert controls.plan("run").request.plan()["micro_batches"] == "auto"
    assert default_schedule(Request(model="mlp", micro_batches="auto")) == "gpipe"
    ticked = Panel(Request(model="mlp", micro_batches="auto"), devices=device_table).controls
    assert ticked.auto_micro_batches.value and ticked.micro_batches.disabled
