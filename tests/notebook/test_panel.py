"""The panel without a browser or a kernel: values set, buttons clicked, outputs read."""

from __future__ import annotations

import time

import pandas as pd
import psutil
import pytest

from gpu_parallel_kit.notebook.controls import PanelPlan, device_options
from gpu_parallel_kit.notebook.panel import Panel
from gpu_parallel_kit.options.request import Request
from tests import builders


def small_request(**overrides) -> Request:
    x, y = builders.small_data()
    values = dict(model=builders.small_mlp, data=(x, y), batch_size=32, steps_per_epoch=3)
    return Request(**{**values, **overrides})


def mime(output) -> list[str]:
    return [key for item in output.outputs for key in item.get("data", {"text": ""})]


def wait_until(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_device_options_name_the_devices(device_table):
    assert device_options(device_table, limit=8)[:2] == [
        ("/cpu:0 · virtual device on 2 cores", 0),
        ("/cpu:1 · virtual device on 2 cores", 1),
    ]
    assert len(device_options(device_table, limit=4)) == 8  # the CPU's are listed already


def test_one_gpu_is_offered_with_virtual_gpus_beside_it():
    one_gpu = pd.DataFrame(
        [dict(index=0, name="/gpu:0", kind="gpu", description="NVIDIA T4",
              memory_bytes=16 * 2**30, virtual=False, physical="/physical_device:GPU:0")]
    )  # fmt: skip
    assert device_options(one_gpu, limit=4) == [
        ("/gpu:0 · NVIDIA T4 · 16 GiB", 0),
        ("/gpu:1 · virtual: the GPUs above, split", 1),
        ("/gpu:2 · virtual: the GPUs above, split", 2),
        ("/gpu:3 · virtual: the GPUs above, split", 3),
    ]


def test_controls_produce_the_plan_the_api_takes(shell, device_table):
    panel = Panel(small_request(), devices=device_table, title="small_mlp on x y")
    assert "gpk-panel" in panel.widget._dom_classes
    assert panel.controls.devices.value == (0, 1, 2, 3)
    assert panel.plan("compare").devices == ((0,), (0, 1), (0, 1, 2, 3))
    controls = panel.controls
    controls.devices.value = (1, 3)
    controls.strategies["pipeline"].value = True
    controls.schedule.value = "1f1b"
    controls.micro_batches.value = 4
    controls.batch_size.value = 64
    controls.epochs.value = 2
    controls.steps_per_epoch.value = 0
    plan = panel.plan("run")
    assert plan == PanelPlan(
        action="run",
        request=plan.request,
        strategies=("single", "data", "pipeline"),
        devices=((1, 3),),
    )
    assert (plan.request.batch_size, plan.request.epochs, plan.request.steps_per_epoch) == (
        64,
        2,
        None,
    )
    assert plan.request.plan()["schedule"] == "1f1b"
    assert plan.request.plan()["micro_batches"] == 4
    assert plan.request.plan()["backend"] == ["tensorflow"]
    assert "Compare: on 1, 2 of them" in controls.hint.value
    controls.backend.value = ("tensorflow", "jax")  # "both": one table that holds both
    controls.strategies["tensor"].value = True
    both = panel.plan("compare")
    assert both.request.plan()["backend"] == ["tensorflow", "jax"]
    assert "tensor" in both.strategies


def test_the_hint_says_how_many_workers_multiworker_starts(shell, device_table):
    panel = Panel(small_request(workers=3), devices=device_table)
    assert "multiworker" not in panel.controls.hint.value
    panel.controls.strategies["multiworker"].value = True
    assert "<code>multiworker</code> starts 3 local worker processes" in panel.controls.hint.value


def test_schedule_and_micro_batches_show_for_model_only(shell, device_table):
    panel = Panel(small_request(), devices=device_table)
    options = panel.controls.model_options
    assert options.layout.display == "none"
    panel.controls.strategies["pipeline"].value = True
    assert options.layout.display is None
    panel.controls.strategies["pipeline"].value = False
    assert options.layout.display == "none"


def test_an_empty_choice_is_one_red_sentence(shell, device_table):
    panel = Panel(small_request(), devices=device_table)
    for box in panel.controls.strategies.values():
        box.value = False
    panel.run_button.click()
    assert not panel.busy
    assert "gpk-error" in panel.status.value
    assert "no strategy is ticked" in panel.status.value
    assert not panel.run_button.disabled and not panel.compare_button.disabled


def test_a_refused_plan_is_one_red_sentence_and_the_panel_stays_usable(
    shell, device_table, fake_cpu
):
    panel = Panel(small_request(batch_size=30), devices=device_table)
    panel.compare_button.click()
    assert panel.wait(timeout=30)
    assert "batch_size=30 is not divisible by 4 devices" in panel.status.value
    assert "gpk-error" in panel.status.value
    assert not panel.compare_button.disabled and panel.stop_button.disabled
    assert panel.runs.children == ()  # refused before any worker started
    panel.controls.batch_size.value = 25
    panel.compare_button.click()
    assert panel.wait(timeout=30)
    assert "batch_size=25 is not divisible by 2 devices" in panel.status.value


def test_a_bad_value_keeps_the_previous_results(shell, device_table, fake_cpu):
    from gpu_parallel_kit.comparison import Comparison
    from gpu_parallel_kit.notebook import result_tabs
    from gpu_parallel_kit.runs.results.run_result import RunResult

    panel = Panel(small_request(), devices=device_table)
    earlier = RunResult(
        run_id="s1", experiment_id="e", strategy="single", devices=1, virtual=False,
        status="ok", global_batch=32, step_time_s=0.01, throughput_samples_s=3200.0,
    )  # fmt: skip
    panel.comparison = Comparison([earlier])
    result_tabs.fill(panel.outputs, panel.comparison)
    table_before = panel.outputs["table"].outputs
    panel.controls.batch_size.value = 250  # not divisible by 4 devices
    panel.compare_button.click()
    assert panel.wait(timeout=30)
    assert "batch_size=250 is not divisible by 4 devices" in panel.status.value
    assert panel.outputs["table"].outputs == table_before
    assert panel.comparison.results == [earlier]


def test_every_strategy_name_fits_its_checkbox(shell, device_table):
    panel = Panel(small_request(), devices=device_table)
    for name, box in panel.controls.strategies.items():
        assert float(box.layout.width.removesuffix("em")) >= 0.6 * len(name) + 2


@pytest.mark.slow
def test_compare_fills_every_tab_in_the_background(shell):
    panel = Panel(small_request(), title="small_mlp on x y")
    panel.controls.devices.value = (0, 1)
    panel.controls.strategies["pipeline"].value = True
    panel.compare_button.click()
    assert panel.busy  # the click returned while workers train
    assert panel.run_button.disabled and panel.compare_button.disabled
    assert not panel.stop_button.disabled
    assert panel.wait(timeout=240)
    assert "Done in" in panel.status.value, panel.status.value
    assert not panel.run_button.disabled and panel.stop_button.disabled
    table = panel.comparison.table
    assert list(zip(table["strategy"], table["devices"], strict=True)) == [
        ("single", 1),
        ("data", 1),
        ("data", 2),
        ("pipeline", 1),
        ("pipeline", 2),
    ]
    assert set(table["status"]) == {"ok"}
    rows = panel.runs.children
    assert len(rows) == 5
    assert all(row.children[1].bar_style == "success" for row in rows)
    assert "median step" in rows[-1].children[2].value
    html = panel.outputs["table"].outputs[0]["data"]["text/html"]
    assert "gpk-table" in html and "speedup" in html
    for tab in ("training time", "speedup", "memory"):
        (image,) = panel.outputs[tab].outputs
        # base64 text: raw bytes cannot cross the widget's JSON state to the browser
        assert isinstance(image["data"]["image/png"], str), tab
    assert mime(panel.outputs["pipeline timeline"]).count("image/png") == 2


@pytest.mark.slow
def test_stop_cancels_within_a_couple_of_seconds(shell):
    panel = Panel(small_request(model=builders.slow_when_distributed))
    panel.controls.devices.value = (0, 1)
    panel.compare_button.click()  # single×1 and data×1 train; data×2 hangs in its builder
    assert wait_until(lambda: _phase(panel, 2) == "building the model", timeout=120)
    time.sleep(0.5)
    here = psutil.Process()
    workers = [p for p in here.children(recursive=True) if p.ppid() != here.pid]
    assert workers, "no worker was running"
    panel.stop_button.click()
    pressed = time.perf_counter()
    assert panel.stop_button.disabled and "Stopping" in panel.status.value
    assert panel.wait(timeout=10)
    # "A couple of seconds", against a builder that would hang for minutes: 1.4 s measured on a
    # quiet 2-core machine, 2.2 s under CI's own load, which the bound leaves room for.
    assert time.perf_counter() - pressed < 4
    assert list(panel.comparison.table["status"]) == ["ok", "ok", "cancelled"]
    assert "Stopped after" in panel.status.value and "2 of 3 runs finished" in panel.status.value
    assert panel.runs.children[-1].children[1].bar_style == "warning"
    assert not panel.compare_button.disabled
    assert wait_until(lambda: not any(_alive(w) for w in workers), timeout=2)


def _phase(panel: Panel, row: int) -> str:
    rows = panel.runs.children
    return rows[row].children[2].value if len(rows) > row else ""


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_the_panel_says_what_it_offers_every_strategy_backend_and_tab(shell, device_table):
    from gpu_parallel_kit.notebook.result_tabs import TABS
    from gpu_parallel_kit.strategies import runnable_names

    panel = Panel(small_request(), devices=device_table)
    text = panel.offers.value
    assert all(f"<code>{name}</code>" in text for name in runnable_names())
    assert all(tab in text for tab in TABS) and "backend" in text
    assert "<code>tensor</code>: each layer" in text and "<i>(jax)</i>" in text
    assert "capacity factor" in text and "plan a cluster run" in text


def test_a_slurm_partition_picked_runs_the_comparison_on_one_allocation_there(shell, device_table):
    from gpu_parallel_kit.cluster.slurm.allocation import SlurmCluster
    from gpu_parallel_kit.cluster.slurm.commands import parse_partitions

    listed = parse_partitions(
        "gpu*|up|4|64|gpu:a100:8(S:0-1)|node[1-4]\ncpu|up|2|32|(null)|small[1-2]"
    )
    alone = Panel(small_request(), devices=device_table, partitions=[])
    assert alone.controls.where.layout.display == "none"  # no Slurm here: nothing to pick
    assert alone.plan("compare").request.cluster is None
    panel = Panel(small_request(), devices=device_table, partitions=listed)
    controls = panel.controls
    assert [label for label, _ in controls.where.options] == [
        "this machine",
        "Slurm gpu: 4 node(s) (node[1-4]), 8 GPUs and 64 CPUs each",
        "Slurm cpu: 2 node(s) (small[1-2]), 32 CPUs each",
    ]
    assert panel.plan("compare").device_choices() == [(0,), (0, 1), (0, 1, 2, 3)]
    controls.where.value = "gpu"
    assert "On Slurm partition <code>gpu</code>" in controls.hint.value
    plan = panel.plan("compare")
    assert plan.request.cluster == SlurmCluster(nodes=1, gpus_per_node=8, partition="gpu")
    assert plan.device_choices() == [1, 2, 4]  # the allocation's devices, by count
    assert plan.describe().endswith("on Slurm partition gpu")
    controls.devices.value = tuple(range(8))
    controls.where.value = "cpu"
    assert panel.plan("compare").request.cluster.nodes == 1  # CPU nodes: one is enough
