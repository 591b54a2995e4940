"""`gpk search --run-here` and `--compare-here`, and the same on `%gpk search`: the leading plans
run here after the search, as the panel's plan tab runs them; a mistake is one line before
anything is counted. The counting child and the plan runs are stood in for."""

from __future__ import annotations

import re

import pytest

from gpu_parallel_kit.api import Experiment
from gpu_parallel_kit.cli.commands import main
from gpu_parallel_kit.comparison import Comparison
from gpu_parallel_kit.runs.results.run_result import RunResult

from .test_search_command import CLUSTER, SAMPLE, counted  # noqa: F401 - a fixture

SEARCHED = ["search", "--model", "mlp", *SAMPLE, *CLUSTER, "--global-batch", "64"]


@pytest.fixture
def plan_runs(monkeypatch):
    """Experiment.run_plan and compare_plans recorded: (what, plans, devices, batch, backend)."""
    calls = []

    def ran(what):
        def method(self, plans, devices=None, *, blocks=None, cancel=None, **options):
            calls.append((what, plans, devices, self.training.batch_size, self.backend))
            rows = 1 if what == "run_plan" else len(plans)
            return Comparison([_result(f"r{i}") for i in range(rows)])

        return method

    monkeypatch.setattr(Experiment, "run_plan", ran("run_plan"))
    monkeypatch.setattr(Experiment, "compare_plans", ran("compare_plans"))
    return calls


def _result(run_id: str) -> RunResult:
    return RunResult(
        run_id=run_id, experiment_id="e", strategy="tensor", devices=2, virtual=True,
        status="ok", global_batch=32, step_time_s=0.01, throughput_samples_s=3200.0,
    )  # fmt: skip


def test_gpk_search_runs_the_plan_of_a_rank_here(capsys, counted, plan_runs):  # noqa: F811
    argv = [*SEARCHED, "--run-here", "2", "--data", "tabular", "--batch-size", "32"]
    assert main([*argv, "--devices-here", "2", "--backend", "jax"]) == 0
    ((what, plan, devices, batch, backend),) = plan_runs
    assert (what, devices, batch, backend) == ("run_plan", 2, 32, "jax")
    assert plan.name == 1  # the second leading plan's row
    out = capsys.readouterr().out
    plans, ran = out.split("The best plan", 1)
    assert plans.startswith("Plans for mlp on 2x8 a100")
    assert "tensor" in ran and "ok" in ran  # the run's table printed after the plans


def test_gpk_search_compares_the_leading_plans_here(capsys, counted, plan_runs):  # noqa: F811
    assert main([*SEARCHED, "--compare-here", "3"]) == 0
    ((what, plans, devices, batch, backend),) = plan_runs
    assert (what, len(plans), devices, batch, backend) == (
        "compare_plans",
        3,
        None,
        256,
        "tensorflow",
    )


def test_asking_both_ways_is_one_line_before_the_count(capsys, counted, plan_runs):  # noqa: F811
    assert main([*SEARCHED, "--run-here", "1", "--compare-here", "3"]) != 0
    assert "give --run-here RANK or --compare-here N, not both" in capsys.readouterr().err
    assert counted == [] and plan_runs == []


def test_a_rank_beyond_the_plans_is_one_line(capsys, counted, plan_runs):  # noqa: F811
    assert main([*SEARCHED, "--run-here", "100000"]) != 0
    assert re.search(r"--run-here 100000 names no plan: \d+ fit", capsys.readouterr().err)
    assert plan_runs == []
