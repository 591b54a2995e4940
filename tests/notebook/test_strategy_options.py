"""The panel's strategy options: a control appears only while a ticked strategy takes its option,
carries that option's own help, and ends up in the plan; a bad value is one sentence."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.notebook.panel import Panel
from gpu_parallel_kit.notebook.strategy_options import mesh_shapes, panel_options
from gpu_parallel_kit.options.request import Request
from gpu_parallel_kit.strategies import option_named, strategy_record
from tests import builders


def panel_of(device_table, **request) -> Panel:
    x, y = builders.small_data()
    values = dict(model=builders.small_mlp, data=(x, y), batch_size=32, steps_per_epoch=3)
    return Panel(Request(**{**values, **request}), devices=device_table, partitions=[])


def tick(panel: Panel, *names: str) -> None:
    for name, box in panel.controls.strategies.items():
        box.value = name in names


def test_mesh_shapes_hold_exactly_the_devices():
    assert mesh_shapes(4) == [(1, 4), (2, 2), (4, 1)]
    assert mesh_shapes(6) == [(1, 6), (2, 3), (3, 2), (6, 1)]
    assert mesh_shapes(1) == [(1, 1)]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
@pytest.mark.parametrize("strategy", ["single", "data", "tensor", "expert", "fsdp", "pipeline"])
def test_a_control_shows_exactly_when_a_ticked_strategy_takes_its_option(
    shell, device_table, strategy, backend
):
    panel = panel_of(device_table, backend=backend)
    tick(panel, strategy)
    takes = set(strategy_record(strategy).option_names())
    shown = set(panel.controls.strategy_options.shown())
    # on the picked backend: the long-sequence options are JAX's alone
    assert shown == {o.name for o in panel_options() if o.taken_on(backend)} & takes


def test_the_long_sequence_options_follow_the_backend_picked(shell, device_table):
    panel = panel_of(device_table, backend="tensorflow")
    tick(panel, "data")
    assert "context" not in panel.controls.strategy_options.shown()
    panel.controls.backend.value = ("jax",)
    assert "context" in panel.controls.strategy_options.shown()


def test_each_control_carries_its_option_own_help(shell, device_table):
    panel = panel_of(device_table)
    tick(panel, "expert")
    options = panel.controls.strategy_options.controls
    assert option_named("capacity_factor").help[:40] in options["capacity_factor"].help.value
    assert options["experts"].help.value.startswith("dense (keras-hub's bank")
    tick(panel, "tensor", "expert")  # both take the mesh, each with its own words
    mesh = options["mesh"].help.value
    assert "tensor: devices on the (data x model) axes" in mesh
    assert "; expert: devices on the (data x expert) axes" in mesh


def test_the_mesh_offers_only_the_shapes_of_the_picked_devices(shell, device_table):
    panel = panel_of(device_table)
    tick(panel, "tensor")
    mesh = panel.controls.strategy_options.controls["mesh"].widget
    assert [label for label, _ in mesh.options] == ["default", "1x4", "2x2", "4x1"]
    panel.controls.devices.value = (0, 1)
    assert [label for label, _ in mesh.options] == ["default", "1x2", "2x1"]


def test_picked_options_reach_the_plan(shell, device_table):
    panel = panel_of(device_table, backend="jax")
    tick(panel, "tensor", "expert", "data")
    options = panel.controls.strategy_options.controls
    options["mesh"].widget.value = (2, 2)
    options["experts"].widget.value = "dispatched"
    options["capacity_factor"].widget.value = "2"
    options["checkpointing"].widget.value = "selective"
    options["sequence_parallel"].widget.value = True
    options["context"].widget.value = "2"
    options["workers"].widget.value = "2"
    plan = panel.plan("run").request.plan()
    assert plan["mesh"] == (2, 2) and plan["experts"] == "dispatched"
    assert plan["capacity_factor"] == 2.0 and plan["checkpointing"] == "selective"
    assert plan["sequence_parallel"] is True
    assert (plan["context"], plan["workers"]) == (2, 2)
    tick(panel, "single")  # no ticked strategy takes them: the API's defaults again
    untouched = panel.plan("run").request.plan()
    assert untouched["mesh"] is None and untouched["experts"] == "dense"
    assert untouched["workers"] is None and untouched["checkpointing"] is None


def test_the_magic_values_are_the_controls_starting_values(shell, device_table):
    panel = panel_of(device_table, mesh=(2, 2), experts="dispatched", workers=3)
    tick(panel, "expert", "data")
    options = panel.controls.strategy_options.controls
    assert options["mesh"].widget.value == (2, 2)
    assert options["experts"].widget.value == "dispatched"
    assert options["workers"].widget.value == "3"
    assert panel.plan("run").request.mesh == (2, 2)


def test_the_workers_box_sets_the_hint(shell, device_table):
    panel = panel_of(device_table)
    tick(panel, "multiworker")
    panel.controls.strategy_options.controls["workers"].widget.value = "3"
    assert "starts 3 local worker processes" in panel.controls.hint.value


def test_a_mesh_that_does_not_hold_the_devices_is_one_sentence_before_anything_runs(
    shell, device_table
):
    panel = panel_of(device_table)
    tick(panel, "tensor")
    mesh = panel.controls.strategy_options.controls["mesh"].widget
    mesh.value = (2, 2)
    panel.controls.devices.value = (0, 1, 2)  # the 2x2 chosen before is kept, and refused
    assert mesh.value == (2, 2)
    with pytest.raises(GpkError, match=r"mesh=\(2, 2\) holds 4 devices but the run has 3"):
        panel.plan("run")
    panel.run_button.click()
    assert not panel.busy and panel.runs.children == ()
    assert "gpk-error" in panel.status.value and "mesh=(2, 2) holds 4 devices" in panel.status.value
    assert "Traceback" not in panel.status.value
    assert mesh.value == (2, 2) and panel.controls.devices.value == (0, 1, 2)
    panel.controls.devices.value = (0, 1, 2, 3)
    assert panel.plan("compare").request.mesh == (2, 2)  # the comparison's 4 devices


def test_a_bad_text_value_is_one_sentence_naming_the_box(shell, device_table):
    panel = panel_of(device_table)
    tick(panel, "expert")
    box = panel.controls.strategy_options.controls["capacity_factor"].widget
    box.value = "lots"
    panel.compare_button.click()
    assert not panel.busy
    assert "capacity_factor=&#x27;lots&#x27; is not a number like 1.25" in panel.status.value
    assert "capacity factor box" in panel.status.value
    assert box.value == "lots"


def test_run_runs_each_strategy_with_every_option_given(shell, device_table, monkeypatch):
    from gpu_parallel_kit.api import Experiment
    from gpu_parallel_kit.comparison import Comparison

    from .test_plan_tab import _result

    ran = []

    def run(self, strategy, devices, *, cancel=None, **plan):
        ran.append((strategy, devices, plan["backend"], plan.get("workers")))
        return _result(f"r{len(ran)}")

    monkeypatch.setattr(Experiment, "run", run)
    monkeypatch.setattr(Experiment, "compare", lambda *a, **k: Comparison([]))
    panel = panel_of(device_table)
    tick(panel, "single", "data")
    panel.controls.backend.value = ("jax",)
    panel.controls.devices.value = (0, 1)
    panel.controls.strategy_options.controls["workers"].widget.value = "2"
    panel.run_button.click()
    assert panel.wait(timeout=30)
    # a comparison gives workers to multiworker alone; a run takes them
    assert ran == [("single", (0,), "jax", None), ("data", (0, 1), "jax", 2)]
    assert "Done in" in panel.status.value and panel.comparison.results[0].run_id == "r1"


def test_run_on_a_slurm_partition_hands_every_run_the_allocation(shell, device_table, monkeypatch):
    from gpu_parallel_kit.api import Experiment
    from gpu_parallel_kit.cluster.slurm.allocation import SlurmCluster
    from gpu_parallel_kit.cluster.slurm.commands import parse_partitions

    from .test_plan_tab import _result

    ran = []

    def run(self, strategy, devices, *, cancel=None, **plan):
        ran.append((strategy, devices, plan.get("cluster")))
        return _result(f"r{len(ran)}")

    monkeypatch.setattr(Experiment, "run", run)
    monkeypatch.setattr(Experiment, "plan", lambda self, *args, **plan: None)
    x, y = builders.small_data()
    request = Request(model=builders.small_mlp, data=(x, y), batch_size=32, steps_per_epoch=3)
    listed = parse_partitions("gpu*|up|4|64|gpu:a100:8(S:0-1)|node[1-4]")
    panel = Panel(request, devices=device_table, partitions=listed)
    tick(panel, "single", "data")
    panel.controls.where.value = "gpu"
    panel.run_button.click()
    assert panel.wait(timeout=30)
    allocation = SlurmCluster(nodes=1, gpus_per_node=8, partition="gpu")
    assert ran == [("single", 1, allocation), ("data", 4, allocation)]
