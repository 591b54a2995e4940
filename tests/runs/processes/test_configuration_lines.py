"""A comparison's progress: one line per configuration, however many rounds it measures, on a
terminal (redrawn in place), in a notebook (one output updated) and through a pipe (printed as
each ends); a failing configuration keeps its sentence on its line."""

from __future__ import annotations

import dataclasses
import io
import re

import ipywidgets as widgets
import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.notebook.progress_rows import RunRow
from gpu_parallel_kit.runs.processes import configuration_lines
from gpu_parallel_kit.runs.processes.configuration_lines import (
    DisplayedLines,
    RedrawnLines,
    RoundsSoFar,
)
from tests.builders import instant_result

CONFIGURATIONS = 3  # single×1, data×1, data×2
ROUNDS = 3
REASON = "need 21.5 MiB on /cpu:0, over the memory_budget of 16 MiB; split the model"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _measured(spec):
    """An ok round whose steps give an interval."""
    return instant_result(spec, step_time_s=0.004, step_times_s=(0.0039, 0.004, 0.0041) * 4)


def _oom_on_two(spec):
    if spec.devices.count == 2:
        return dataclasses.replace(
            instant_result(spec), status="oom", reason=REASON, step_time_s=None
        )
    return _measured(spec)


def _compare(progress=True):
    exp = gpk.Experiment(model="mlp", data="tabular", batch_size=64, samples=256, progress=progress)
    return exp.compare(["single", "data"], [1, 2], rounds=ROUNDS)


def _screen(written: str) -> list[str]:
    """What a terminal shows after `written`: its cursor-up ("ESC[nF") and erase-line ("ESC[2K")
    codes applied."""
    rows: list[str] = []
    at = 0
    for part in re.split(r"(\x1b\[\d*F|\x1b\[2K|\n)", written):
        if (up := re.fullmatch(r"\x1b\[(\d*)F", part)) is not None:
            at -= int(up.group(1) or 1)
        elif part == "\x1b[2K":
            if at < len(rows):
                rows[at] = ""
        elif part == "\n":
            at += 1
        elif part:
            while len(rows) <= at:
                rows.append("")
            rows[at] += part
    return [row for row in rows if row]


def test_a_piped_comparison_of_several_rounds_prints_one_line_per_configuration(
    fake_machine, capsys
):
    fake_machine.answer(_measured)
    _compare()
    lines = capsys.readouterr().out.splitlines()
    assert len(fake_machine.specs) == CONFIGURATIONS * ROUNDS
    assert len(lines) == CONFIGURATIONS, lines
    assert all(" · 3 rounds · median step 4 ms (" in line for line in lines), lines
    assert lines[0].startswith("single×1:") and lines[2].startswith("data×2 (virtual):")


def test_a_failing_configuration_keeps_its_sentence_on_its_line(fake_machine, capsys):
    fake_machine.answer(_oom_on_two)
    _compare()
    out = capsys.readouterr().out
    entries = re.split(r"\n(?! )", out.strip())  # a wrapped line's rest is indented
    assert len(entries) == CONFIGURATIONS, out
    failed = " ".join(entries[-1].split())
    assert failed == f"data×2 (virtual): oom: {REASON}"


def test_rounds_keeps_a_line_per_round(fake_machine, capsys):
    fake_machine.answer(_measured)
    _compare(progress="rounds")
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.endswith(": started") for line in lines) == CONFIGURATIONS * ROUNDS


def test_a_progress_word_other_than_rounds_is_refused():
    with pytest.raises(gpk.GpkError, match="progress='lines' is not a choice"):
        gpk.Experiment(model="mlp", data="tabular", samples=256, progress="lines")


def test_a_terminal_shows_one_line_per_configuration_redrawn_in_place(fake_machine, monkeypatch):
    terminal = _Terminal()
    chosen = []

    def on_terminal(labels, enabled=True, stream=None):
        chosen.append(RedrawnLines(labels, terminal))
        return chosen[-1]

    monkeypatch.setattr("gpu_parallel_kit.api.configuration_lines", on_terminal)
    fake_machine.answer(_oom_on_two)
    _compare()
    shown = _screen(terminal.getvalue())
    starts = [row for row in shown if not row.startswith(" ")]
    assert len(starts) == CONFIGURATIONS, shown
    assert starts[0].startswith("single×1:") and "ok · 3 rounds · median step" in starts[0]
    assert REASON.split()[-1] in shown[-1]  # the sentence whole, under its own line's start


def test_a_notebook_keeps_one_output_of_one_line_per_configuration(fake_machine, monkeypatch):
    outputs: list[dict] = []

    class Handle:
        def update(self, data, raw=False):
            outputs[-1] = data

    def display(data, raw=False, display_id=False):
        outputs.append(data)
        return Handle()

    monkeypatch.setattr("IPython.display.display", display)
    monkeypatch.setattr(configuration_lines, "in_widget", lambda: True)
    fake_machine.answer(_measured)
    _compare()
    (saved,) = outputs  # one output, updated in place: the saved notebook keeps its last text
    lines = saved["text/plain"].splitlines()
    assert len(lines) == CONFIGURATIONS and all("ok · 3 rounds" in line for line in lines)


def test_the_panel_grows_one_row_per_configuration(fake_machine):
    box = widgets.VBox()
    fake_machine.answer(_oom_on_two)
    _compare(progress=lambda spec: RunRow(spec, box))
    rows = box.children
    assert len(rows) == CONFIGURATIONS
    label, bar, text, reason = rows[-1].children
    assert bar.bar_style == "danger" and text.value == "oom" and "split the model" in reason.value
    assert rows[0].children[1].bar_style == "success"
    assert rows[0].children[2].value.startswith("ok · 3 rounds · median step 4 ms (")


def test_a_line_says_the_round_in_hand_and_what_the_rounds_before_measured():
    line = RedrawnLines(["data×2 (virtual)"], _Terminal()).line(0)
    assert line.text() == "waiting"
    line({"event": "round", "round": 1})
    line({"event": "phase", "phase": "building the model"})
    assert line.text() == "round 1 · start-up: building the model"
    line.measured(RoundsSoFar("r", 1, 0.0042, 0.0038, 0.0047))
    line({"event": "round", "round": 2})
    line({"event": "progress", "step": 3, "total": 8, "step_time_s": 0.0043})
    assert line.text() == (
        "round 2 · step 3/8 · 4.3 ms per step · so far 1 round · median step 4.2 ms (3.8–4.7)"
    )
    line.measured(RoundsSoFar("r", 2, 0.0042, 0.004, 0.0044, ended="known"))
    assert line.text() == "ok · 2 rounds · median step 4.2 ms (4–4.4) · known"
    assert line.ended


def test_a_displayed_block_wraps_an_ended_lines_sentence_whole():
    lines = DisplayedLines(["pipeline×4 (virtual)"])
    line = lines.line(0)
    line.round = 1
    line.failure, line.ended = f"oom: {REASON} " + "and more words " * 6, True
    block = lines.block().splitlines()
    assert len(block) > 1 and all(len(row) <= 100 for row in block)
