"""The answer of a plan search (`planning/plans.py`, `explanation.py`): ranked, explained, drawn."""

from __future__ import annotations

import re

import pytest

from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster
from gpu_parallel_kit.analysis.cost_model.memory_plan import plan_memory
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.planning import plans_of
from gpu_parallel_kit.planning.explanation import TIE, explain, gigabytes, seconds
from gpu_parallel_kit.planning.published_moe_run import moe_card

from .conftest import gpt_card

PLAN = ["data", "tensor", "stages", "sharding", "micro_batch_size", "micro_batches", "schedule",
        "virtual_stages", "checkpointing", "attention", "sequence_parallel", "context",
        "stage_blocks"]  # fmt: skip
TIME = ["step_time_s", "step_time_low_s", "step_time_high_s", "model_tflops_per_device", "mfu"]
MEMORY = ["params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "memory_bytes"]
COLUMNS = [*PLAN, *TIME, *MEMORY, "fits", "bound"]
BOUNDS = {"compute", "memory-bandwidth", "launches", "comm:tensor", "comm:data", "comm:stages",
          "bubble"}  # fmt: skip


@pytest.fixture(scope="module")
def found():
    return plans_of(gpt_card(), GPUCluster("a100", nodes=4, per_node=8), 256, name="gpt")


def test_the_best_plan_fits_and_nothing_that_fits_is_faster(found):
    table = found.table
    assert set(COLUMNS) <= set(table.columns)
    assert set(table["bound"]) <= BOUNDS
    best = found.best
    assert best.fits and best.memory_bytes <= found.room
    assert best.step_time_s == table[table["fits"]]["step_time_s"].min()
    first = table.iloc[0]
    assert (best.data, best.tensor, best.stages) == (first.data, first.tensor, first.stages)
    assert (table["step_time_low_s"] <= table["step_time_s"]).all()
    assert (table["step_time_s"] <= table["step_time_high_s"]).all()
    assert len(found.top(3)) == 3 and found.top(3)["fits"].all()


def test_the_leading_pipelines_are_simulated_and_say_so(found):
    sources = found.table["bubble_source"]
    assert set(sources) <= {"simulated", "closed form"}
    simulated = found.table[sources == "simulated"]
    assert len(simulated) and simulated["fits"].all() and (simulated["stages"] > 1).all()
    assert "simulated" in found.note


def test_explain_quotes_the_tables_figures(found):
    words = found.explain()
    best, runner_up = found.table.iloc[0], found.fitting.iloc[1]
    assert seconds(best["step_time_s"]) in words
    assert gigabytes(best["memory_bytes"]) in words
    assert seconds(runner_up["step_time_s"]) in words
    extra = runner_up["step_time_s"] - best["step_time_s"]
    if extra > TIE * best["step_time_s"]:
        assert seconds(extra) in words
    assert not re.search(r"\b0 ms more", words)


def test_a_runner_up_that_ties_says_so_and_what_tells_them_apart(found):
    best = dict(found.fitting.iloc[0])
    other = next(s for s in ("fsdp", "zero-1") if s != best["sharding"])
    leaner = {**best, "sharding": other, "memory_bytes": best["memory_bytes"] / 2}
    later = {**best, "tensor": 2, "step_time_s": best["step_time_s"] * 1.5}
    cluster, room = GPUCluster("a100", nodes=4, per_node=8), found.room
    words = explain([best, leaner, later], cluster, room)
    assert "ties with it" in words and "more" not in words.split("ties with it")[1].split(".")[0]
    assert gigabytes(leaner["memory_bytes"]) in words and f"sharding {other}" in words
    # A tie in the step and the memory alike tells nothing: the sentence is left out.
    same = {**best, "sharding": other}
    assert "The runner-up" not in explain([best, same, later], cluster, room)


def test_a_tensor_group_across_the_network_is_named_with_its_link():
    # Two nodes of 4: tensor 8 crosses the 45 GB/s network, tensor 4 stays on NVLink.
    found = plans_of(gpt_card(), GPUCluster("a100", nodes=2, per_node=4), 64)
    words = found.explain()
    if "tensor 8 crosses net400g" in words:
        assert "45 GB/s" in words
    eight = found.fitting[found.fitting["tensor"] == 8]
    four = found.fitting[found.fitting["tensor"] == 4]
    assert eight["comm:tensor_s"].min() > four["comm:tensor_s"].min()


def test_nothing_fits_is_one_sentence_naming_the_true_shortfall():
    found = plans_of(gpt_card(), GPUCluster("a100", nodes=1, per_node=1), 64)
    assert not found.table["fits"].any()
    leanest = found.table["memory_bytes"].min()
    with pytest.raises(GpkError) as raised:
        _ = found.best
    sentence = str(raised.value)
    assert sentence.startswith("no plan fits 1 × 1 a100 80 GB")
    assert f"needs {gigabytes(leanest)} of {gigabytes(found.room)} usable" in sentence
    assert sentence.count(". ") == 0 and "add nodes" in sentence
    assert sentence in repr(found)


def test_fp32_needs_more_memory_than_bf16_on_every_plan():
    cluster = GPUCluster("a100", nodes=4, per_node=8)
    half = plans_of(gpt_card("bf16"), cluster, 256).table
    full = plans_of(gpt_card("fp32"), cluster, 256).table
    keys = [c for c in PLAN if c != "stage_blocks"]  # a tuple: no merge key
    both = half.merge(full, on=keys, suffixes=("_bf16", "_fp32"))
    assert len(both) == len(half)
    assert (both["memory_bytes_fp32"] > both["memory_bytes_bf16"]).all()
    assert (both["params_bytes_fp32"] == 2 * both["params_bytes_bf16"]).all()


@pytest.mark.parametrize("sharding", ["none", "zero-1", "zero-2", "fsdp"])
def test_plan_memory_and_the_search_agree_on_a_plan(found, sharding):
    row = found.table[
        (found.table["tensor"] == 1) & (found.table["stages"] == 1)
        & (found.table["sharding"] == sharding)
    ].iloc[0]  # fmt: skip
    planned = plan_memory(params=found.card.parameters, devices=int(row["data"]))
    strategy = {"none": "data", "fsdp": "fsdp"}.get(sharding, sharding)
    same = planned.set_index("strategy").loc[strategy]
    for part in ("params_bytes", "grads_bytes", "optimizer_bytes"):
        assert same[part] == pytest.approx(row[part])


def test_the_views_fit_a_notebook(found):
    text = repr(found)
    assert text.splitlines()[0].startswith("Plans for gpt on 4x8 a100")
    assert re.search(r"\d GB", text) and re.search(r"\d(\.\d+)? (s|ms)", text)
    page = found._repr_html_()
    assert "<table" in page and "max-width: 1200px" in page
    assert found.text(2).count("\n") < text.count("\n")


def test_the_figure_marks_the_best_and_the_usable_memory(found):
    figure = found.plot()
    axes = figure.axes[0]
    labels = [t.get_text() for t in axes.get_legend().get_texts()]
    assert any(label.startswith("fits") for label in labels)
    assert any(label.startswith("best") for label in labels)
    assert "usable memory" in labels
    line = next(x for x in axes.get_lines() if x.get_label() == "usable memory")
    assert line.get_xdata()[0] == pytest.approx(found.room / 1e9)


def test_the_explanation_names_what_flash_attention_and_sequence_parallelism_gave(found):
    best = found.best
    words = found.explain()
    assert best.attention == "flash"
    said = re.search(r"run as written, the same plan would need ([\d.]+) GB", words)
    assert said and float(said.group(1)) * 1e9 > best.memory_bytes
    if best.sequence_parallel:
        saved = re.search(r"Sequence parallelism .* saves ([\d.]+) GB", words)
        assert saved and float(saved.group(1)) > 0
    as_written = plans_of(gpt_card(), GPUCluster("a100", nodes=4, per_node=8), 256,
                          attention="as-written")  # fmt: skip
    assert "Flash attention" not in as_written.explain()
    assert set(as_written.table["attention"]) == {"as-written"}


def _seconds_of(number: str, unit: str) -> float:
    return float(number) * (1e-3 if unit == "ms" else 1.0)


def test_the_explanation_never_names_a_fitting_plan_faster_than_the_best(found):
    best = found.best.step_time_s
    words = found.explain()
    # As written, the same plan keeps its scores and moves them: more memory and a longer step.
    said = re.search(r"run as written, .* and take ([\d.]+) (m?s), ([\d.]+) (m?s) more", words)
    assert said and _seconds_of(*said.group(1, 2)) > best
    # A plan that does not fit and ties with the best is not "a faster plan".
    rows = found._rows
    tie = {**rows[0], "fits": False, "step_time_s": best * (1 - TIE / 2)}
    assert "A faster plan" not in explain([rows[0], tie], found.cluster, found.room)
    quicker = {**tie, "step_time_s": best * (1 - 2 * TIE)}
    assert "A faster plan" in explain([rows[0], quicker], found.cluster, found.room)


def test_a_mixture_of_experts_table_shows_its_expert_axis_even_unsplit():
    found = plans_of(moe_card(), GPUCluster("h100", nodes=8, per_node=8), 256, name="mixtral")
    assert "<th>expert</th>" in found._repr_html_()
    dense = plans_of(gpt_card(), GPUCluster("a100", nodes=4, per_node=8), 256, name="gpt")
    assert "<th>expert</th>" not in dense._repr_html_()
