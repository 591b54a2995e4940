"""benchmarks/pipeline_table.py on literal rows of two backends: ratios stay within a backend,
and the cost per task sets both backends on one line per case."""

from __future__ import annotations

import importlib
import pathlib

import pytest

BENCHMARKS = pathlib.Path(__file__).parents[2] / "benchmarks"


@pytest.fixture
def table(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("pipeline_table")


def _row(backend, schedule, m, step_s, overhead_s):
    runs = importlib.import_module("pipeline_runs")
    case = runs.Case(schedule, 2, m, "compiled", backend)
    return runs.Row(case, step_s=step_s, spread_s=0.0, task_overhead_s=overhead_s, outside_s=0.002)


def _cells(line):
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_naive_this_is_taken_within_each_backend(table):
    rows = [
        _row("tensorflow", "naive", 1, 0.010, 40e-6),
        _row("jax", "naive", 1, 0.040, 1e-6),
        _row("tensorflow", "gpipe", 2, 0.020, 30e-6),
        _row("jax", "gpipe", 2, 0.020, 2e-6),
    ]
    header, _, *lines = table.table_lines(rows)
    column = _cells(header).index("naive/this")
    assert [_cells(line)[column] for line in lines] == ["1.00", "1.00", "0.50", "2.00"]


def test_cost_per_task_has_one_line_per_case_and_a_blank_where_a_backend_failed(table):
    runs = importlib.import_module("pipeline_runs")
    failed = runs.Row(runs.Case("gpipe", 2, 2, "compiled", "jax"), status="error", reason="x")
    rows = [
        _row("tensorflow", "naive", 1, 0.010, 40e-6),
        _row("jax", "naive", 1, 0.040, 1e-6),
        _row("tensorflow", "gpipe", 2, 0.020, 30e-6),
        failed,
    ]
    header, _, *lines = table.task_cost_lines(rows)
    assert len(lines) == 2
    names = _cells(header)
    training = [names.index(f"{b} per task, training µs") for b in ("tensorflow", "jax")]
    assert [_cells(lines[0])[c] for c in training] == ["40", "1"]
    assert [_cells(lines[1])[c] for c in training] == ["30", ""]
