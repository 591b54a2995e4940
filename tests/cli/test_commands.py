"""The `gpk` command: help, one-line errors before any worker starts, exit statuses, output.

Fast tests call `main([...])` in-process on a fake CPU-only machine (the one device seam patched)
with the worker launcher replaced, so they neither import TensorFlow nor start a worker. One slow
test runs the real command in a subprocess.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from gpu_parallel_kit.cli.commands import main
from gpu_parallel_kit.runs.processes.child_process import RunInterrupted
from gpu_parallel_kit.runs.results.run_result import RunResult

COMMANDS = ["devices", "run", "compare", "demo", "history", "worker"]


def _result(spec, status="ok", step_time_s=0.01):
    return RunResult(
        run_id=spec.run_id,
        experiment_id=spec.experiment_id,
        strategy=spec.strategy,
        devices=spec.devices.count,
        virtual=spec.devices.virtual,
        status=status,
        reason="" if status == "ok" else f"{status} on purpose",
        global_batch=spec.global_batch,
        wall_time_s=0.5 if status == "ok" else None,
        step_time_s=step_time_s if status == "ok" else None,
        throughput_samples_s=spec.global_batch / step_time_s if status == "ok" else None,
        created_at="2025-01-01T00:00:00+00:00",
        extra={"parameter_bytes": 433_704},  # the built-in MLP's, for projections
    )


# A CPU-only machine on which starting a worker fails the test; `fake_runs` answers instead.
pytestmark = pytest.mark.usefixtures("no_workers")


@pytest.fixture
def fake_runs(fake_machine):
    """Workers replaced by instant results; `statuses` maps (strategy, devices) to a status."""
    statuses: dict[tuple[str, int], str] = {}

    def run(spec):
        status = statuses.get((spec.strategy, spec.devices.count), "ok")
        if status == "ctrl-c":
            raise RunInterrupted(_result(spec, "cancelled"))
        return _result(spec, status)

    fake_machine.answer(run)
    return statuses


@pytest.mark.parametrize("command", COMMANDS)
def test_help_of_each_command_exits_0(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"usage: gpk {command}" in out


def test_help_explains_the_options(capsys):
    assert main(["compare", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--model", "--data", "--batch-size", "--strategies", "--devices", "--out"):
        assert option in out
    assert "module:function" in out and ".npz" in out


def test_top_level_help_lists_the_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(command in out for command in COMMANDS)


def _npz_without_y(tmp_path):
    path = tmp_path / "only_x.npz"
    np.savez(path, x=np.zeros((8, 4), dtype="float32"))
    return str(path)


BAD_INPUTS = [
    (["run", "--strategy", "pipelines"], "pipelines"),
    (
        [
            "run",
            "--strategy",
            "model",
            "--devices",
            "2",
            "--schedule",
            "naive",
            "--micro-batches",
            "4",
        ],
        "schedule='naive' runs one micro-batch",
    ),
    (["run", "--strategy", "model", "--balance", "3,x"], "3,x"),
    (["run", "--devices", "0"], "devices=0"),
    (["run", "--batch-size", "250", "--strategy", "data", "--devices", "4"], "248 or 252"),
    (["run", "--model", "no_such_model"], "no_such_model"),
    (["run", "--epochs", "0"], "epochs=0"),
    (["run", "--data", "missing.npz"], "missing.npz"),
    (["run", "--devices", "two"], "indices like 0,1"),
    (["run", "--strategy", "single", "--devices", "2"], "strategy='data'"),
    (["run", "--model", "no_such_module_xyz:build", "--data", "tabular"], "no_such_module_xyz"),
    (["run", "--model", "json:no_such_builder", "--data", "tabular"], "no_such_builder"),
    (["run", "--model", "json:dumps"], "--data is needed"),
    (["run", "--data", "no_such_set"], "no_such_set"),
    (["compare", "--devices", "1", "0"], "devices=0"),
    (["compare", "--strategies", "single", "zero"], "zero"),
    (["compare", "--measure-s", "-2"], "--measure-s"),
    (["history", "--limit", "0"], "--limit"),
    # A projection's presets are checked before any run: one sentence naming them.
    (["compare", "--project", "nvlink9"], "'nvlink4', 'nvlink3', 'pcie5'"),
    (["compare", "--project", "pcie4", "--gpu", "b200"], "'a100', 'h100', 'h200'"),
    (["compare", "--project", "pcie4", "--precision", "int8"], "'fp32', 'tf32', 'bf16'"),
    (["compare", "--project", "pcie4", "--compute", "guessed"], "'counted', 'measured'"),
    (["run", "--strategy", "multiworker", "--devices", "2"], "per worker needs GPUs"),
    (["run", "--strategy", "multiworker", "--cluster", "missing.json"], "missing.json"),
    (["worker", "--cluster", "missing.json", "--index", "0"], "missing.json"),
    (["run", "--no-such-option"], "--no-such-option"),
    (["frobnicate"], "frobnicate"),
    ([], "choose a command"),
]


@pytest.mark.parametrize(
    ("argv", "named"), BAD_INPUTS, ids=[" ".join(argv) or "(none)" for argv, _ in BAD_INPUTS]
)
def test_bad_input_is_one_line_and_exit_2(argv, named, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gpk: error: ")
    assert named in lines[0]
    assert "Traceback" not in captured.err and "usage:" not in captured.err


def test_npz_without_y_is_one_line(tmp_path, capsys):
    assert main(["run", "--model", "mlp", "--data", _npz_without_y(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'y'" in err and "numpy.savez" in err


def test_npz_data_and_builder_reach_the_experiment(tmp_path, capsys, fake_runs, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # the CLI puts the working folder first
    path = tmp_path / "train.npz"
    x = np.random.default_rng(0).standard_normal((64, 12)).astype("float32")
    np.savez(path, x=x, y=(x[:, 0] > 0).astype("int32"))
    argv = ["run", "--model", "tests.builders:small_mlp", "--data", str(path), "--batch-size", "8"]
    assert main([*argv, "--strategy", "data", "--devices", "0,1", "--no-progress"]) == 0
    assert "data" in capsys.readouterr().out


def test_run_prints_its_row_and_exit_status(capsys, fake_runs):
    assert main(["run", "--strategy", "data", "--devices", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:2] == ["strategy", "devices"]
    assert "data" in out and "ok" in out
    fake_runs[("data", 2)] = "oom"
    assert main(["run", "--strategy", "data", "--devices", "2", "--no-progress"]) == 1
    assert "oom" in capsys.readouterr().out


def test_compare_writes_a_report_only_with_out(tmp_path, capsys, fake_runs):
    assert main(["compare", "--devices", "1", "2", "--no-progress"]) == 0
    assert "Report" not in capsys.readouterr().out
    assert not (tmp_path / "gpk_report").exists()
    out_dir = tmp_path / "report"
    assert main(["compare", "--devices", "1", "2", "--no-progress", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert str(out_dir / "table.csv") in out
    assert (out_dir / "speedup.png").stat().st_size > 0


def test_compare_takes_a_measuring_budget(capsys, fake_runs, monkeypatch):
    asked = {}

    def compare(self, strategies, devices, **options):
        asked.update(options)
        raise KeyboardInterrupt  # what the front end does after the call is tested elsewhere

    monkeypatch.setattr("gpu_parallel_kit.api.Experiment.compare", compare)
    main(["compare", "--devices", "1", "2", "--no-progress", "--measure-s", "2.5"])
    assert asked["measure_s"] == 2.5 and asked["rounds"] is None


def test_compare_prints_a_progress_line_per_configuration_or_with_verbose_per_round(
    capsys, fake_runs, monkeypatch
):
    """Piped (capsys is not a terminal): one line per configuration as it ends, however many
    rounds it ran; --verbose keeps a line when each round starts and one when it ends."""
    monkeypatch.setenv("GPK_ROUNDS", "3")
    fake_runs[("data", 2)] = "oom"
    assert main(["compare", "--devices", "1", "2"]) == 1
    out = capsys.readouterr().out.splitlines()
    progress = [line for line in out if line.startswith(("single×1:", "data×"))]
    assert len(progress) == 3, out
    assert progress[-1] == "data×2 (virtual): oom: oom on purpose"
    assert main(["compare", "--devices", "1", "2", "--verbose"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert sum(line.endswith(": started") for line in out) == 3 * 3


def test_the_demo_measures_within_its_own_budget(fake_runs, monkeypatch):
    from gpu_parallel_kit.cli import demo

    asked = {}

    def compare(self, strategies, devices, **options):
        asked.update(options)
        raise KeyboardInterrupt

    monkeypatch.setattr("gpu_parallel_kit.api.Experiment.compare", compare)
    monkeypatch.setattr(demo.Experiment, "count_ahead", lambda self: None)
    main(["demo", "--no-progress"])
    assert asked["measure_s"] == demo.MEASURE_S < 6


COUNT = pathlib.Path(__file__).parents[1] / "analysis" / "data" / "mlp_jax_count.json"


def test_compare_projects_onto_the_asked_gpu_precision_and_batch(capsys, fake_runs, monkeypatch):
    counted = json.loads(COUNT.read_text())
    asked = []
    monkeypatch.setattr(
        "gpu_parallel_kit.api.count_in_child", lambda spec, batches: asked.append(1) or counted
    )
    argv = ["compare", "--devices", "1", "2", "--no-progress", "--project", "pcie4"]
    argv += ["--project-devices", "4", "8", "--gpu", "a100", "--precision", "tf32"]
    assert main([*argv, "--project-batch", "4096"]) == 0
    out = capsys.readouterr().out
    assert asked == [1]  # counted once, in place of the child
    projected = [line for line in out.splitlines() if "projected on pcie4+a100" in line]
    assert [line.split()[:3] for line in projected] == [
        ["single", "1", "no"],
        ["data", "4", "no"],
        ["data", "8", "no"],
    ]
    assert all(line.split()[3] == "4096" for line in projected)


def test_compare_projects_measured_compute_when_asked(capsys, fake_runs, monkeypatch):
    monkeypatch.setattr("gpu_parallel_kit.api.count_in_child", _never)
    argv = ["compare", "--devices", "1", "2", "--no-progress", "--project", "nvlink3"]
    assert main([*argv, "--project-devices", "2", "--compute", "measured"]) == 0
    out = capsys.readouterr().out
    # Measured compute names no GPU: the label is the link alone.
    assert "projected on nvlink3, comp" in out and "nvlink3+" not in out


def _never(spec, batches):
    raise AssertionError("measured compute counts nothing")


def test_compare_with_a_failed_run_exits_1(capsys, fake_runs):
    fake_runs[("data", 4)] = "failed"
    assert main(["compare", "--no-progress"]) == 1
    assert "failed" in capsys.readouterr().out


def test_ctrl_c_in_compare_prints_what_finished_and_exits_130(capsys, fake_runs):
    fake_runs[("data", 2)] = "ctrl-c"
    assert main(["compare", "--no-progress", "--out", "report"]) == 130
    captured = capsys.readouterr()
    assert "single" in captured.out and "cancelled" in captured.out
    assert "interrupted" in captured.err


def test_ctrl_c_in_run_prints_the_cancelled_row_and_exits_130(capsys, fake_runs):
    fake_runs[("data", 2)] = "ctrl-c"
    assert main(["run", "--strategy", "data", "--devices", "2", "--no-progress"]) == 130
    captured = capsys.readouterr()
    assert "cancelled" in captured.out and "interrupted" in captured.err
    assert "Traceback" not in captured.err


def test_history_lists_logged_runs(capsys, fake_runs):
    assert main(["history"]) == 0
    assert "(no runs)" in capsys.readouterr().out
    assert main(["compare", "--devices", "1", "2", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["history", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 of 3 configurations in ")
    assert len(out.strip().splitlines()) == 4  # header line, table header, two rows
    assert main(["history", "--per-round"]) == 0
    assert capsys.readouterr().out.startswith("3 of 3 runs in ")


def test_devices_lists_virtual_cpu_devices(capsys):
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "/cpu:0" in out and "/cpu:7" in out


def test_multiworker_options_reach_the_plan(capsys, fake_machine):
    fake_machine.answer(_result)
    assert main(["run", "--strategy", "multiworker", "--workers", "4", "--no-progress"]) == 0
    spec = fake_machine.specs[0]
    assert (spec.workers, spec.replicas, spec.mode) == (4, 4, "explicit")


@pytest.mark.slow
@pytest.mark.parametrize(
    "plan",
    [["--strategy", "data", "--devices", "2"], ["--strategy", "multiworker", "--workers", "2"]],
)
def test_gpk_run_in_a_subprocess(tmp_path, plan):
    argv = ["run", "--model", "mlp", *plan]
    completed = subprocess.run(
        [sys.executable, "-m", "gpu_parallel_kit.cli", *argv, "--steps-per-epoch", "6"]
        + ["--no-progress"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    header, row = completed.stdout.strip().splitlines()
    assert row.split()[:2] == [plan[1], "2"]
    assert " ok " in row


def test_calibrate_passes_its_flags_to_gpk_calibrate_and_prints_a_row_per_busy_count(
    capsys, monkeypatch
):
    from tests.analysis.cost_model.test_device_calibration import calibration

    asked = {}

    def calibrate(**keywords):
        asked.update(keywords)
        return dataclasses.replace(calibration(), path="/kept/jax-cpu-2.json")

    monkeypatch.setattr("gpu_parallel_kit.api.calibrate", calibrate)
    flags = ["calibrate", "--backend", "jax", "--devices", "2", "--budget", "10", "--model", "mlp"]
    assert main([*flags, "--no-save", "--no-progress"]) == 0
    assert {k: asked[k] for k in ("backend", "devices", "budget_s", "save", "progress")} == {
        "backend": "jax", "devices": 2, "budget_s": 10.0, "save": False, "progress": False,
    }  # fmt: skip
    assert asked["model"] == "mlp" and asked["batch_size"] == 256
    out = capsys.readouterr().out
    assert out.startswith("calibrated on 2 cpu (jax)") and "matmul (GFLOP/s)" in out
    assert "Kept in /kept/jax-cpu-2.json" in out


def test_a_bad_calibrate_flag_is_one_sentence(capsys):
    assert main(["calibrate", "--budget", "-3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpk: error:") and "budget" in err and "Traceback" not in err
