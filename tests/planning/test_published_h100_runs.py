"""Published H100 runs (`planning/published_h100_runs.json`): each row's plan, batch, precision
and source hold together on the literal data (docs/published-runs.md, "H100 runs, from NVIDIA's
recipes")."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

import gpu_parallel_kit.planning

DATA = Path(gpu_parallel_kit.planning.__file__).with_name("published_h100_runs.json")
SOURCES = {
    ("NVIDIA/dgxc-benchmarking", "llama3.1/README_405b.md"): 24,
    ("NVIDIA/dgxc-benchmarking", "nemotron/README_340b.md"): 10,
    ("NVIDIA/dgxc-benchmarking", "nemo_megatron/README_175b.md"): 20,
    ("NVIDIA/dgxc-benchmarking", "maxtext/README_70b.md"): 22,
    ("NVIDIA/NeMo", "docs/source/performance/performance_summary.md"): 5,
    ("NVIDIA/NeMo", "docs/source/performance/performance_long_sequence.md"): 18,
    ("NVIDIA-NeMo/Megatron-Bridge", "docs/performance-summary-archive.md"): 26,
}
# Megatron-Core folds expert parallelism over the tensor-parallel ranks (ETP 1): these rows run
# EP 32 on TP 2 with DP x CP = 16.
FOLDED = {
    f"mbridge-{release}-qwen3-235b-a22b-fp8-256"
    for release in ("25.11", "26.02", "26.02.01", "26.04", "26.04.01")
}
# The table's GA 2 is not GBS / (MBS x DP) = 8 for the plan it prints.
GA_MISMATCH = {"mbridge-25.11-gpt-oss-120b-bf16-64"}


@pytest.fixture(scope="module")
def data():
    return json.loads(DATA.read_text())


@pytest.fixture(scope="module")
def runs(data):
    return data["runs"]


def planned(runs):
    """The rows whose source gives the whole plan (not the long-sequence 'Without CP' rows)."""
    return [r for r in runs if None not in (r["tp"], r["pp"], r["cp"], r["dp"])]


def test_every_source_has_its_rows_and_every_row_a_unique_id(runs):
    counts = Counter((r["source"]["repo"], r["source"]["path"]) for r in runs)
    assert counts == SOURCES
    assert len({r["id"] for r in runs}) == len(runs) == sum(SOURCES.values())


def test_every_row_names_its_source_at_a_commit_and_its_stack(runs):
    for r in runs:
        source = r["source"]
        assert (source["repo"], source["path"]) in SOURCES, r["id"]
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), r["id"]
        assert source["table"] and r["stack"], r["id"]


def test_precision_is_bf16_or_fp8_and_fp8_cs_names_its_recipe(runs):
    for r in runs:
        assert r["precision"] in {"bf16", "fp8"}, r["id"]
        assert r["precision_as_named"].lower().startswith(r["precision"]), r["id"]
        assert (r["precision_as_named"] == "FP8-CS") == (r["fp8_recipe"] is not None), r["id"]


def test_every_plan_uses_exactly_the_runs_gpus(runs):
    rows = planned(runs)
    assert len(rows) == len(runs) - 9  # the nine long-sequence rows without CP give no plan
    for r in rows:
        assert r["tp"] * r["pp"] * r["cp"] * r["dp"] == r["gpus"], r["id"]
        assert r["gpus"] % r["gpus_per_node"] == 0 or r["gpus"] < r["gpus_per_node"], r["id"]
    for r in runs:
        if r not in rows:
            assert r["cp"] == 1 and r["tp"] is None and "Without CP" in r["note"], r["id"]


def test_expert_parallelism_fits_megatron_cores_grid(runs, data):
    moe = [r for r in planned(runs) if r["ep"] > 1]
    assert {r["model_key"] for r in moe} == {"qwen3-235b-a22b", "qwen3-30b-a3b", "gpt-oss-120b"}
    for r in moe:
        assert "experts" in data["models"][r["model_key"]], r["id"]
        # the expert grid EP x ETP lies across TP x CP x DP within each pipeline stage
        assert (r["tp"] * r["cp"] * r["dp"]) % (r["ep"] * r["etp"]) == 0, r["id"]
        assert r["model"] and r["etp"] == 1 and "etp" in r["derived"], r["id"]
    # EP divides DP x CP everywhere but where it folds over TP
    assert {r["id"] for r in moe if (r["dp"] * r["cp"]) % r["ep"]} == FOLDED
    dense = [r for r in runs if "experts" not in data["models"][r["model_key"]]]
    assert all(r["ep"] == 1 and r["etp"] is None for r in dense)


def test_the_global_batch_divides_into_micro_batches_over_data_parallel(runs):
    for r in planned(runs):
        micro = r["micro_batch"] or 1  # the long-sequence table gives no micro-batch size
        assert r["global_batch"] % (micro * r["dp"]) == 0, r["id"]
        accumulation = r["global_batch"] // (micro * r["dp"])
        if r["grad_accum_reported"] is not None and r["id"] not in GA_MISMATCH:
            assert r["grad_accum_reported"] == accumulation, r["id"]
    (odd,) = [r for r in runs if r["id"] in GA_MISMATCH]
    assert odd["grad_accum_reported"] != odd["global_batch"] // (odd["micro_batch"] * odd["dp"])


def test_step_times_and_tokens_per_second_agree(runs):
    timed = [r for r in runs if "step_time_s" in r["reported"]]
    assert len(timed) == 76
    for r in timed:
        tokens = r["sequence"] * r["global_batch"] / r["reported"]["step_time_s"]
        assert r["reported"]["tokens_per_s"] == pytest.approx(tokens, rel=0.002), r["id"]


def test_every_row_reports_its_figure_and_lists_what_was_derived(runs, data):
    for r in runs:
        assert r["reported"][r["reported_metric"]] > 0, r["id"]
        assert set(r["derived"]) <= set(r), r["id"]
        assert r["model_key"] in data["models"], r["id"]
        if r["source"]["repo"] != "NVIDIA/NeMo" or "long_sequence" not in r["source"]["path"]:
            assert "dp" in r["derived"], r["id"]  # every source but one prints no DP
    for model in data["models"].values():
        assert model["source"] and model["layers"] > 0 and model["vocabulary"] > 0
        if "experts" in model:
            assert model["top_k"] < model["experts"] and model["moe_ffn_hidden"] > 0


def test_the_405b_runs_on_576_and_2304_gpus_keep_one_plan(runs):
    rows = [r for r in runs if r["model_key"] == "llama3.1-405b" and r["gpus"] in (576, 2304)]
    dgxc = [r for r in rows if r["source"]["repo"] == "NVIDIA/dgxc-benchmarking"]
    assert len(dgxc) == 8  # two releases, BF16 and FP8
    for r in dgxc:
        assert (r["tp"], r["pp"], r["cp"], r["vp"], r["layers_run"]) == (8, 9, 2, 7, 126)
        assert r["global_batch"] == 252 * r["gpus"] // 576
