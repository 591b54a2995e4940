"""The demo: its plan (fast, workers faked) and end to end (`gpk demo` in a subprocess)."""

from __future__ import annotations

import csv
import json
import os
import pathlib
import subprocess
import sys

import pytest

from gpu_parallel_kit.cli import demo
from gpu_parallel_kit.cli.commands import main
from gpu_parallel_kit.runs.results.run_result import RunResult

DATA = pathlib.Path(__file__).parents[1] / "analysis" / "data"
REPORT_FILES = ("table.csv", "table.md", "wall_time.png", "throughput.png", "speedup.png")


@pytest.mark.parametrize(
    ("quick", "rounds", "steps"), [("", "1", 32), ("1", "1", 24), ("1", "2", 24)]
)
def test_run_demo_plans_the_grid_and_writes_the_report(
    tmp_path, monkeypatch, fake_machine, quick, rounds, steps
):
    monkeypatch.setenv("GPK_QUICK", quick)
    monkeypatch.setenv("GPK_ROUNDS", rounds)  # each round trains a pass: rounds add measuring

    def fake_run(spec):
        return RunResult(
            run_id=spec.run_id,
            experiment_id=spec.experiment_id,
            strategy=spec.strategy,
            devices=spec.devices.count,
            virtual=spec.devices.virtual,
            status="ok",
            global_batch=spec.global_batch,
            step_time_s=0.01,
            throughput_samples_s=spec.global_batch / 0.01,
            wall_time_s=0.5,
            extra={"parameter_bytes": 4 * 50_000},  # what the projection scales the all-reduce by
        )

    fake_machine.answer(fake_run)
    # The MLP's step as the worker counts it (tests/analysis/data), without a counting child.
    counted = json.loads((DATA / "mlp_jax_count.json").read_text())
    monkeypatch.setattr("gpu_parallel_kit.api.count_in_child", lambda spec, batches: counted)
    comparison = demo.run_demo(str(tmp_path / "report"), progress=False)
    grid = [("single", 1), ("data", 1), ("data", 2), ("data", 4)]
    specs = fake_machine.specs
    planned = [(s.strategy, s.devices.count, s.training.steps_per_epoch) for s in specs]
    assert planned == [(strategy, count, steps) for strategy, count in grid] * int(rounds)
    table = comparison.table
    assert set(table["global_batch"]) == {demo.BATCH_SIZE}
    assert all((tmp_path / "report" / name).stat().st_size > 0 for name in REPORT_FILES)
    projected = table[table["projected"]]
    assert set(projected["devices"]) == {1, 4, 8}
    label = f"{demo.PROJECTION}+{demo.PROJECTED_GPU}"
    assert set(projected["experiment_id"].str.rsplit(":", n=1).str[-1]) == {label}
    eight = projected[projected["devices"] == 8]
    assert (eight["speedup"] < 3).all()  # launch-bound on each GPU: communication is not hidden
    assert "bound by kernel launches" in comparison.advice
    # One epoch leaves one point per run: no convergence plot is drawn from that.
    assert not (tmp_path / "report" / "convergence.png").exists()


@pytest.mark.slow
def test_demo_writes_a_report_and_logs_its_runs(tmp_path, capsys):
    out_dir = tmp_path / "gpk_report"
    completed = subprocess.run(
        [sys.executable, "-m", "gpu_parallel_kit.cli", "demo", "--out", str(out_dir)]
        + ["--no-progress"],
        cwd=tmp_path,
        env={**os.environ, "GPK_QUICK": "1", "GPK_ROUNDS": "1"},  # rounds: tested above
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    for name in REPORT_FILES:
        assert (out_dir / name).stat().st_size > 0, name
        assert str(out_dir / name) in completed.stdout

    with open(out_dir / "table.csv", newline="") as handle:
        every_row = list(csv.DictReader(handle))
    rows = [row for row in every_row if row["projected"] == "False"]
    projected = {row["devices"] for row in every_row if row["projected"] == "True"}
    assert projected == {"1", "4", "8"}
    assert [(row["strategy"], row["devices"]) for row in rows] == [
        ("single", "1"),
        ("data", "1"),
        ("data", "2"),
        ("data", "4"),
    ]
    assert all(row["status"] == "ok" for row in rows), [row["reason"] for row in rows]

    assert main(["history"]) == 0  # the same log: GPK_LOG is set for the test and its child
    listed = capsys.readouterr().out.strip().splitlines()
    assert listed[0].startswith("4 of 4 configurations in ")  # one row per configuration
    # The backend leads each row where it is not the default (the demo prefers JAX).
    rows = [line.split() for line in listed[2:]]
    assert [words[1:3] if words[0] == "jax" else words[:2] for words in rows] == [
        ["single", "1"],
        ["data", "1"],
        ["data", "2"],
        ["data", "4"],
    ]
