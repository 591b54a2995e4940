"""The cost model's answers as records: a step's parts and what bounds it, a device's memory by
part, and the table columns they become."""

from __future__ import annotations

from gpu_parallel_kit.analysis.cost_model.plan_figures import (
    PART_COLUMNS,
    ComputeTerms,
    MemoryByPart,
    StepParts,
    StepTime,
)

TERMS = ComputeTerms(1.0, 0.5, 0.1)


def step(parts: StepParts, terms: ComputeTerms = TERMS) -> StepTime:
    return StepTime(likely=3.0, short=2.0, long=4.0, parts=parts, terms=terms)


def test_the_largest_part_bounds_the_step_and_the_compute_is_named_by_its_term():
    assert step(StepParts(1.0, tensor=2.0)).bound == "comm:tensor"
    assert step(StepParts(2.0, tensor=1.0)).bound == "compute"
    assert step(StepParts(2.0), ComputeTerms(0.1, 2.0, 0.5)).bound == "memory-bandwidth"
    assert step(StepParts(2.0), ComputeTerms(0.1, 0.2, 2.0)).bound == "launches"
    # a tie goes to the first part in the table's order
    assert step(StepParts(1.0, data=1.0, bubble=1.0)).bound == "compute"
    assert step(StepParts(0.0, data=1.0, bubble=1.0)).bound == "comm:data"


def test_a_step_becomes_the_tables_columns():
    row = step(StepParts(1.0, expert=0.5)).columns()
    assert (row["step_time_s"], row["step_time_low_s"], row["step_time_high_s"]) == (3.0, 2.0, 4.0)
    assert [key for key in row if key in PART_COLUMNS] == list(PART_COLUMNS)
    assert row["comm:expert_s"] == 0.5 and row["flops_s"] == 1.0 and row["bound"] == "compute"


def test_memory_adds_by_part_and_totals():
    dense, experts = MemoryByPart(1.0, 2.0, 3.0), MemoryByPart(0.5, 0.5, 1.0, activations=4.0)
    both = dense + experts
    assert both == MemoryByPart(1.5, 2.5, 4.0, 4.0) and both.total == 12.0
    assert list(both.columns()) == [
        "params_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
    ]  # fmt: skip
