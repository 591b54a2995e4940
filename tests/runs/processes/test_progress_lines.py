"""A run's progress where nothing redraws a line (stdout to a file or a CI log): one line at its
start and one at its end, never a bar's carriage-return updates (a comparison's lines, one per
configuration: test_configuration_lines.py)."""

from __future__ import annotations

import io

import gpu_parallel_kit as gpk
from gpu_parallel_kit.runs.processes.progress_bars import (
    LINE_WIDTH,
    WIDGET_BAR_FORMAT,
    LineProgress,
    redrawn,
)
from gpu_parallel_kit.runs.results.run_result import RunResult


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_file_is_not_redrawn_and_a_terminal_is():
    assert not redrawn(io.StringIO())
    assert redrawn(_Terminal())


def test_a_run_says_when_it_starts_and_how_it_ended_on_two_lines():
    out = io.StringIO()
    progress = LineProgress("data×2 (virtual)", stream=out)
    progress({"event": "phase", "phase": "building the model"})
    progress({"event": "phase", "phase": "training", "total": 8})
    for step in range(1, 9):
        progress({"event": "progress", "step": step, "total": 8, "step_time_s": 0.004})
    ok = RunResult(
        run_id="r", experiment_id="e", strategy="data", devices=2, virtual=True, status="ok",
        step_time_s=0.0042,
    )  # fmt: skip
    progress.close(ok)
    lines = out.getvalue().splitlines()
    assert lines[0] == "data×2 (virtual): started"
    assert lines[1].startswith("data×2 (virtual): ok · median step 4.2 ms · start-up ")
    assert len(lines) == 2 and "\r" not in out.getvalue()


def test_a_failed_run_ends_with_its_reason_on_its_line():
    out = io.StringIO()
    progress = LineProgress("single×1", stream=out)
    failed = RunResult(
        run_id="r", experiment_id="e", strategy="single", devices=1, virtual=False,
        status="failed", reason="the loss is NaN",
    )  # fmt: skip
    progress.close(failed)
    assert out.getvalue().splitlines()[-1] == "single×1: failed: the loss is NaN"


def test_rounds_printed_to_a_file_give_one_line_per_run_start_and_end(fake_machine, capsys):
    exp = gpk.Experiment(model="mlp", data="tabular", batch_size=64, samples=256, progress="rounds")
    exp.compare(["single", "data"], [1, 2])
    out = capsys.readouterr().out.splitlines()
    runs = len(fake_machine.specs)
    assert runs == 3
    assert sum(line.endswith(": started") for line in out) == runs
    assert sum(": ok · median step" in line for line in out) == runs


def test_a_long_reason_is_wrapped_between_words():
    out = io.StringIO()
    progress = LineProgress("pipeline×4", stream=out)
    reason = (
        "need 21.5 MiB of parameters and optimizer state on the fullest device but the memory "
        "budget is 10.7 MiB; use more devices, a smaller model or a larger budget"
    )
    failed = RunResult(
        run_id="r", experiment_id="e", strategy="pipeline", devices=4, virtual=True,
        status="oom", reason=reason,
    )  # fmt: skip
    progress.close(failed)
    lines = out.getvalue().splitlines()[1:]
    assert len(lines) == 2 and all(len(line) <= LINE_WIDTH for line in lines)
    words = reason.split()
    assert " ".join(" ".join(lines).split()).endswith(" ".join(words))  # no word cut in two


def test_a_notebook_bar_is_one_widget_without_a_text_bar_beside_it():
    """tqdm.notebook puts its widget where the format says "{bar}"; with a width there it draws
    the text bar too, and each run showed two bars."""
    from tqdm.notebook import tqdm as widget_tqdm

    bar = widget_tqdm(total=8, bar_format=WIDGET_BAR_FORMAT, desc="data×2", display=False)
    bar.update(8)
    bar.display()
    left, _, right = bar.container.children
    assert "█" not in left.value + right.value and "8/8" in right.value
    bar.close()


def test_a_round_trained_by_an_earlier_rounds_process_says_so_instead_of_a_start_up():
    out = io.StringIO()
    progress = LineProgress("data×2 · round 2/3", stream=out)
    progress({"event": "phase", "phase": "training", "total": 8, "startup_s": 0.01})
    later = RunResult(
        run_id="r2", experiment_id="e", strategy="data", devices=2, virtual=True, status="ok",
        step_time_s=0.0042, extra={"trained_in_process_of": "r1"},
    )  # fmt: skip
    progress.close(later)
    end = out.getvalue().splitlines()[-1]
    assert end == "data×2 · round 2/3: ok · median step 4.2 ms · in an earlier round's process"


def test_a_run_over_workers_is_named_by_every_workers_devices_as_its_row_is(fake_machine):
    from gpu_parallel_kit.runs.processes.progress_bars import run_label
    from tests.builders import small_mlp_experiment

    exp = small_mlp_experiment(backend="jax")
    spec = exp.plan("tensor", 2, workers=2, mesh=(2, 2))
    assert run_label(spec).startswith("tensor×4 mesh 2x2")  # the row's devices: 4
    assert run_label(exp.plan("data", 2, workers=2)).startswith("data×4")
    assert run_label(exp.plan("data", 2)).startswith("data×2")
