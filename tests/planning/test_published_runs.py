"""Published training runs (`planning/published_runs.py`): their figures hold together,
and the plan search's projection of each run's own plan lies within the stated tolerance."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_parallel_kit.planning import published_runs
from gpu_parallel_kit.planning.published_runs import RUNS, card, project

A100_PEAK = 312e12
# kit ÷ published throughput at the likely end of each run's own software stack (fitted on its
# runs; each run left out of the fit: tests/planning/test_efficiency_fit.py).
TOLERANCE = (0.85, 1.15)


@pytest.fixture(scope="module")
def table():
    return published_runs.runs_table()


def named(prefix):
    return [run for run in RUNS if run.name.startswith(prefix)]


def test_every_plan_uses_the_runs_gpus_and_divides_its_batch():
    for run in RUNS:
        assert run.data * run.tensor * run.stages == run.gpus, run.name
        assert run.global_batch % (run.data * run.micro_batch_size) == 0, run.name
        assert run.gpus % run.per_node == 0 and run.source, run.name
        assert (run.tflops_per_gpu is None) != (run.iteration_s is None), run.name


def test_every_model_has_a_stored_card_whose_parameters_are_the_published_count():
    for run in RUNS:
        counted = card(run)
        assert (counted.layers, counted.hidden, counted.heads) == (
            run.layers, run.hidden, run.heads,
        )  # fmt: skip
        # within Table 1's rounding to 0.1 B; keras-hub's GPT-2 learns its positions (s·h more
        # than BLOOM's ALiBi)
        assert counted.parameters == pytest.approx(run.parameters, rel=0.02, abs=0.05e9), run.name


def test_the_iteration_times_give_the_papers_own_utilisation():
    # Korthikanti et al., Table 5: MFU of the selective + sequence-parallel runs
    selective = [run for run in named("Korthikanti") if run.recompute == "selective"]
    mfu = [published_runs.published_tflops(run) * 1e12 / A100_PEAK for run in selective]
    assert mfu == pytest.approx([0.415, 0.514, 0.560, 0.563], abs=0.002)
    # Smith et al.: TFLOP/s per GPU at 280, 350 and 420 nodes, counting the recomputed forward
    found = [published_runs.published_tflops(run) for run in named("MT-NLG")]
    assert found == pytest.approx([126, 121, 113], rel=0.01)


def test_the_kits_projection_of_each_published_plan_is_within_the_tolerance(table):
    low, high = TOLERANCE
    outside = {row["name"] for row in table if not low <= row["ratio"] <= high}
    # NeMo's performance summary's Llama 3 8B (docs/published-runs.md, "The Llama rows")
    assert outside <= {"Llama 3 8B FP8, 8 H100, nemo-24.07"}
    assert all(0.8 <= row["ratio"] <= 1.25 for row in table)
    held = RUNS + published_runs.h100_runs() + published_runs.llama_runs()
    assert [row["stack"] for row in table] == [run.stack for run in held]  # each its own
    assert {run.precision for run in held} == {"bf16", "fp8"} and len(held) > len(RUNS)
    for row in table:  # the band's two ends bracket its likely figure
        assert row["ratio_low"] < row["ratio"] < row["ratio_high"], row["name"]


def test_the_run_each_paper_calls_faster_is_projected_faster(table):
    # Korthikanti et al., Table 5: selective recomputation with sequence parallelism beats full
    # recomputation on every model; Smith et al.: MT-NLG's iteration shortens with its nodes.
    by_name = {row["name"]: row for row in table}
    named = (
        "Korthikanti {} B, selective + sequence parallel",
        "Korthikanti {} B, full recomputation",
    )
    pairs = [tuple(name.format(size) for name in named) for size in (22, 175, 530, 1000)]
    pairs += [("MT-NLG 530 B, 2800 GPUs", "MT-NLG 530 B, 2240 GPUs"),
              ("MT-NLG 530 B, 3360 GPUs", "MT-NLG 530 B, 2800 GPUs")]  # fmt: skip
    for faster, slower in pairs:
        assert by_name[faster]["kit_step_s"] < by_name[slower]["kit_step_s"], faster
        # and by about as much: the published ratio of the two steps within a tenth
        published = by_name[faster]["published_step_s"] / by_name[slower]["published_step_s"]
        kit = by_name[faster]["kit_step_s"] / by_name[slower]["kit_step_s"]
        assert kit == pytest.approx(published, rel=0.1), faster


def test_the_sequence_parallel_runs_fit_where_the_paper_ran_them(table):
    selective = [row for row in table if row["recompute"] == "selective"]
    assert len(selective) == 4
    assert [row["name"] for row in selective if not row["fits"]] == []


def test_blooms_seventy_blocks_get_plans_of_more_than_two_stages():
    bloom = next(run for run in RUNS if run.name.startswith("BLOOM"))
    row = project(bloom)
    assert row["best"] is not None and row["best"]["stages"] > 2
    assert sum(row["best"]["stage_blocks"]) == 70


def test_the_docs_page_lists_every_run():
    page = (Path(__file__).parents[2] / "docs" / "published-runs.md").read_text()
    missing = [run.name for run in RUNS if run.name not in page]
    assert missing == []
