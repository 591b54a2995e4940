"""The panel's run rows and the tqdm bars: start-up is a phase, a long reason goes under the bar."""

from __future__ import annotations

import ipywidgets as widgets
import pytest

from gpu_parallel_kit.notebook.progress_rows import RunRow
from gpu_parallel_kit.runs.processes.progress_bars import LINE_WIDTH, RunProgress
from gpu_parallel_kit.runs.results.run_result import RunResult
from tests import builders

REASON = (
    "need 21.5 MiB of parameters and optimizer state on /cpu:0, over the memory_budget of 16 MiB; "
    "split the model (strategy='model') or raise memory_budget"
)


@pytest.fixture
def plan_spec(fake_cpu):
    return builders.small_experiment(builders.small_mlp).plan("data", 4)


def _oom() -> RunResult:
    return RunResult(
        run_id="b", experiment_id="e", strategy="data", devices=4, virtual=True,
        status="oom", reason=REASON,
    )  # fmt: skip


def test_an_oom_row_keeps_its_whole_reason_off_the_bar(plan_spec):
    row = RunRow(plan_spec, widgets.VBox())
    row({"event": "phase", "phase": "building the model"})
    assert row.text.value == "building the model"
    row.close(_oom())
    assert row.text.value == "oom"
    assert REASON.replace("'", "&#x27;") in row.reason.value
    assert row.reason.layout.display is None


def test_a_row_shows_start_up_as_a_phase_then_training_steps(plan_spec):
    row = RunRow(plan_spec, widgets.VBox())
    row({"event": "phase", "phase": "training", "total": 10})
    assert row.text.value.startswith("training (start-up ")
    row({"event": "progress", "step": 3, "total": 10, "step_time_s": 0.0043})
    assert row.text.value == "step 3/10 · 4.3 ms per step"


def test_a_run_started_ahead_shows_its_own_start_up_and_where_it_was_spent(plan_spec):
    row = RunRow(plan_spec, widgets.VBox())
    row({"event": "phase", "phase": "training", "total": 10, "startup_s": 0.34})
    assert row.text.value == "training (start-up 0.3 s beside the last run)"
    followed = RunRow(plan_spec, widgets.VBox())  # the caller's clock saw the whole start-up
    followed({"event": "phase", "phase": "training", "total": 10, "startup_s": 0.0})
    assert "beside" not in followed.text.value
    # The comparison's first run, followed from its start, prepared beside the other first rounds.
    first = RunRow(plan_spec, widgets.VBox())
    first({"event": "phase", "phase": "training", "total": 10, "startup_s": 0.0, "together": True})
    assert first.text.value == "training (start-up 0.0 s beside the other runs)"


def test_a_later_round_says_it_trains_in_an_earlier_rounds_process(plan_spec):
    event = {"event": "phase", "phase": "training", "total": 10, "startup_s": 0.0}
    later = {**event, "trained_in_process_of": "first"}
    row = RunRow(plan_spec, widgets.VBox())
    row(later)
    assert row.text.value == "training (in an earlier round's process)"
    bar = RunProgress("data×4 (virtual) · round 2/3", enabled=False)
    bar(later)
    assert bar.bar.postfix == "in an earlier round's process"


def test_the_text_bar_prints_a_failed_runs_reason_under_it(capsys):
    bar = RunProgress("data×4 (virtual)")
    bar({"event": "phase", "phase": "building the model"})
    bar.close(_oom())
    out = capsys.readouterr()
    printed = out.out + out.err
    # Whole, in lines broken between words (runs/processes/progress_bars.py `wrapped`).
    assert f"data×4 (virtual) oom: {REASON}" in " ".join(printed.split())
    assert all(len(line) <= LINE_WIDTH for line in out.out.splitlines())
