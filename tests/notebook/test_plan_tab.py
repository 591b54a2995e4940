"""The panel's plan tab without a browser: the search's inputs read as `%gpk search` reads its
flags, the answer shown, a leading plan run here from its row and the top 3 compared; a bad value
is one sentence before anything is counted. The counting child and the plan runs are stood in
for (tests/planning and tests/jax run them for real)."""

from __future__ import annotations

import threading

import pytest

from gpu_parallel_kit.api import Experiment
from gpu_parallel_kit.comparison import Comparison
from gpu_parallel_kit.notebook.panel import SECTIONS, Panel
from gpu_parallel_kit.notebook.plan_tab import gpu_choices, plan_label
from gpu_parallel_kit.options.request import Request
from gpu_parallel_kit.planning import Plans, step_count
from gpu_parallel_kit.runs.results.run_result import RunResult
from tests import builders

from .test_search_magic import COUNT


@pytest.fixture
def counted(monkeypatch, tmp_path):
    calls = []

    def count(source, sample, policy, optimizer, progress, cancel=None):
        calls.append(source.name)
        return dict(COUNT)

    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(step_count, "_count_in_child", count)
    monkeypatch.setattr(step_count, "_counted", {})
    return calls


@pytest.fixture
def plan_runs(monkeypatch):
    """Experiment.run_plan and compare_plans recorded: (what, plans, devices) per call."""
    calls, backends = Calls(), []

    def ran(what):
        def method(self, plans, devices=None, *, blocks=None, cancel=None, **options):
            calls.append((what, plans, devices))
            backends.append(self.backend)
            rows = 1 if what == "run_plan" else len(plans)
            return Comparison([_result(f"r{i}") for i in range(rows)])

        return method

    monkeypatch.setattr(Experiment, "run_plan", ran("run_plan"))
    monkeypatch.setattr(Experiment, "compare_plans", ran("compare_plans"))
    calls.backends = backends  # the experiment's backend at each call
    return calls


class Calls(list):
    backends: list[str]


def _result(run_id: str, **changed) -> RunResult:
    fields = dict(
        run_id=run_id, experiment_id="e", strategy="data", devices=2, virtual=True,
        status="ok", global_batch=32, step_time_s=0.01, throughput_samples_s=3200.0,
    )  # fmt: skip
    return RunResult(**{**fields, **changed})


def panel_of(device_table) -> Panel:
    x, y = builders.small_data()
    request = Request(model=builders.small_mlp, data=(x, y), batch_size=32, steps_per_epoch=3)
    return Panel(request, devices=device_table, partitions=[])


def test_the_plan_tab_is_the_panel_second_section(shell, device_table):
    panel = panel_of(device_table)
    assert panel.sections.titles == SECTIONS
    assert panel.sections.children[1] is panel.plan_tab.widget
    tab = panel.plan_tab
    assert [label for label, _ in tab.gpu.options][:3] == ["a100", "h100", "h200"]


def test_the_inputs_are_the_search_magic_options(shell, device_table, counted):
    tab = panel_of(device_table).plan_tab
    tab.gpu.value, tab.nodes.value, tab.per_node.value = "h100", 4, 8
    tab.between.value, tab.global_batch.value, tab.precision.value = "net200g", 256, "fp16"
    tab.stack.value = "megatron-lm-2021"
    options = tab.search_options()
    assert options["gpus"].stack.name == "megatron-lm-2021"
    cluster = options["gpus"]
    assert (cluster.device.name, cluster.nodes, cluster.per_node, cluster.gpus) == (
        "h100", 4, 8, 32
    )  # fmt: skip
    assert cluster.between.name == "net200g" and cluster.inside.name == "nvlink4"
    assert (options["global_batch"], options["precision"]) == (256, "fp16")


@pytest.mark.parametrize(
    ("box", "value", "sentence"),
    [
        ("nodes", 0, "nodes=0 is too few; set nodes to 1 or more"),
        ("per_node", 0, "per_node=0 is too few; set GPUs per node to 1 or more"),
        ("global_batch", -1, "global_batch=-1 is too few; set global batch to 1 or more"),
    ],
)
def test_a_bad_count_is_one_sentence_before_anything_is_counted(
    shell, device_table, counted, box, value, sentence
):
    tab = panel_of(device_table).plan_tab
    getattr(tab, box).value = value
    tab.search_button.click()
    assert not tab.busy and counted == []
    assert "gpk-error" in tab.status.value and sentence in tab.status.value
    assert getattr(tab, box).value == value  # the widget keeps what was typed
    assert not tab.search_button.disabled


def test_search_shows_the_plans_their_explanation_and_plot(shell, device_table, counted):
    tab = panel_of(device_table).plan_tab
    tab.nodes.value, tab.global_batch.value = 4, 64
    tab.search_button.click()
    assert tab.wait(timeout=60)
    assert "gpk-error" not in tab.status.value, tab.status.value
    assert isinstance(tab.plans, Plans) and tab.plans.cluster.gpus == 32
    assert counted == ["tests.builders.small_mlp"]  # the panel's own model, counted once
    html = tab.table.outputs[0]["data"]["text/html"]
    assert "<table" in html and tab.plans.explain()[:40].replace("'", "&#x27;") in html
    (image,) = tab.figure.outputs
    assert isinstance(image["data"]["image/png"], str)  # base64 text for the widget's state
    leading = tab.plans.top(5)
    assert len(tab.rows.children) == len(leading) > 0
    first = tab.rows.children[0]
    assert first.children[0].description == "run here"
    assert plan_label(1, leading.iloc[0]) in first.children[1].value
    assert "Searched in" in tab.status.value and not tab.compare_button.disabled


def test_stop_ends_a_search_while_its_step_is_counted(shell, device_table, monkeypatch, tmp_path):
    started = threading.Event()

    def count(source, sample, policy, optimizer, progress, cancel=None):
        started.set()
        assert cancel is not None and cancel.wait(timeout=30)  # the tab's Stop sets it
        raise step_count.SearchCancelled("stopped while counting")

    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(step_count, "_count_in_child", count)
    monkeypatch.setattr(step_count, "_counted", {})
    tab = panel_of(device_table).plan_tab
    tab.search_button.click()
    assert started.wait(timeout=30)
    tab.stop_button.click()
    assert tab.wait(timeout=30)
    assert tab.status.value.startswith("Stopped: the count was ended") and tab.plans is None


def test_run_here_runs_its_row_on_the_picked_devices(shell, device_table, counted, plan_runs):
    panel = panel_of(device_table)
    tab = panel.plan_tab
    tab.nodes.value, tab.global_batch.value = 4, 64
    tab.search_button.click()
    assert tab.wait(timeout=60)
    panel.controls.devices.value = (0, 1)
    panel.controls.backend.value = ("jax",)
    tab.rows.children[0].children[0].click()
    assert tab.wait(timeout=30)
    ((what, plan, devices),) = plan_runs
    assert (what, devices) == ("run_plan", 2)
    assert plan_runs.backends == ["jax"]  # the backend picked beside, not the API's default
    assert plan.equals(tab.plans.top(5).iloc[0])
    assert "Ran plan #1 here: 1 ok" in tab.status.value
    assert "<table" in tab.ran.outputs[0]["data"]["text/html"]


def test_compare_the_top_3_runs_compare_plans(shell, device_table, counted, plan_runs):
    tab = panel_of(device_table).plan_tab
    tab.nodes.value, tab.global_batch.value = 4, 64
    tab.search_button.click()
    assert tab.wait(timeout=60)
    tab.compare_button.click()
    assert tab.wait(timeout=30)
    ((what, plans, devices),) = plan_runs
    assert what == "compare_plans" and devices == 4
    assert plans.equals(tab.plans.top(3))
    assert f"the top 3 plans here: {len(plans)} ok" in tab.status.value


def test_run_here_before_a_search_is_one_sentence(shell, device_table, plan_runs):
    tab = panel_of(device_table).plan_tab
    tab.run_row(1)
    assert tab.wait(timeout=30)
    assert "no plans yet; click Search plans first" in tab.status.value
    assert plan_runs == [] and not tab.search_button.disabled


def test_a_kept_calibration_is_offered_as_the_gpu(tmp_path):
    (tmp_path / "jax-cpu-4-2026-12-06T21-52-43.json").write_text("{}")
    choices = gpu_choices(tmp_path)
    assert [c.device for c in choices][:3] == ["a100", "h100", "h200"]
    assert choices[-1].label == "calibration jax-cpu-4-2026-12-06T21-52-43"
    assert choices[-1].device.endswith(".json")


def test_calibrate_shows_its_table_and_curves_and_offers_it_as_the_gpu(
    shell, device_table, monkeypatch, tmp_path
):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from gpu_parallel_kit.notebook import plan_tab

    kept = tmp_path / "calibrations" / "jax-cpu-2-2026-12-07T04-00-00.json"
    kept.parent.mkdir()
    asked = []

    class Calibrated:
        devices, device_kind, path = 2, "cpu", str(kept)

        def summary(self):
            return pd.DataFrame({"matmul (TFLOP/s)": [0.1]}, index=[2])

        def plot(self):
            return plt.figure()

    def calibrate(**options):
        asked.append(options)
        kept.write_text("{}")
        return Calibrated()

    monkeypatch.setattr(plan_tab, "calibrate", calibrate)
    monkeypatch.setattr(plan_tab, "calibration_folder", lambda: kept.parent)
    panel = panel_of(device_table)
    panel.controls.devices.value = (0, 1)
    tab = panel.plan_tab
    tab.budget.value = 20
    tab.calibrate_button.click()
    assert tab.wait(timeout=30), tab.status.value
    assert asked == [dict(devices=2, backend="tensorflow", budget_s=20.0, progress=False)]
    assert "gpk-error" not in tab.status.value, tab.status.value
    html, image = tab.calibrated.outputs
    assert "matmul (TFLOP/s)" in html["data"]["text/html"] and "image/png" in image["data"]
    assert tab.gpu.value == str(kept)  # the calibration is the GPU the next search takes
    assert "Calibrated 2 cpu device(s) on tensorflow" in tab.status.value


def test_a_failed_plan_run_says_why_under_its_table(shell, device_table, counted, monkeypatch):
    why = "the model has 2 layers, fewer than 4 stages; use devices=2 or fewer"

    def run_plan(self, plan, devices=None, *, blocks=None, cancel=None, **options):
        return Comparison([_result("r0", status="failed", reason=why)])

    monkeypatch.setattr(Experiment, "run_plan", run_plan)
    tab = panel_of(device_table).plan_tab
    tab.nodes.value, tab.global_batch.value = 4, 64
    tab.search_button.click()
    assert tab.wait(timeout=60)
    tab.run_row(1)
    assert tab.wait(timeout=30)
    assert "Ran plan #1 here: 1 failed" in tab.status.value
    table, reasons = tab.ran.outputs
    assert "failed" in table["data"]["text/html"]
    assert f"data×2 failed</b>: {why}" in reasons["data"]["text/html"]
