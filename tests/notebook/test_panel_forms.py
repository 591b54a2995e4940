"""Every panel control has its `%gpk` and `gpk` form: the strategy options' flags on `run`,
`compare` and `panel`, the plan tab's on `search`, and a panel opened by the magic starts from
the flags' values."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.cli.commands import main
from gpu_parallel_kit.notebook.panel import Panel
from gpu_parallel_kit.notebook.strategy_options import panel_options
from gpu_parallel_kit.options.search import SEARCH

# The plan tab's inputs, by the flag each is read into (`PlanTab.search_options`).
PLAN_TAB_FLAGS = (
    "--device", "--nodes", "--per-node", "--inside", "--between", "--global-batch", "--precision",
    "--stack",
)  # fmt: skip


def magic_help(shell, capsys, command: str) -> str:
    assert shell.run_line_magic("gpk", f"{command} --help") is None
    return capsys.readouterr().out


def gpk_help(capsys, command: str) -> str:
    try:
        main([command, "--help"])
    except SystemExit as done:
        assert done.code in (0, None)
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["run", "compare", "panel"])
def test_every_strategy_option_control_has_its_magic_flag(shell, capsys, command):
    text = magic_help(shell, capsys, command)
    missing = [o.flag for o in panel_options() if o.flag not in text]
    assert not missing, missing


@pytest.mark.parametrize("command", ["run", "compare"])
def test_every_strategy_option_control_has_its_gpk_flag(capsys, command):
    text = gpk_help(capsys, command)
    missing = [o.flag for o in panel_options() if o.flag not in text]
    assert not missing, missing


def test_every_plan_tab_input_has_its_search_flag(shell, capsys):
    assert set(PLAN_TAB_FLAGS) <= {flag.flag for flag in SEARCH}
    for text in (magic_help(shell, capsys, "search mlp"), gpk_help(capsys, "search")):
        assert all(flag in text for flag in PLAN_TAB_FLAGS)
        assert ".json" in text  # --device takes a kept calibration, as the GPU list does
        assert "--run-here" in text and "--compare-here" in text  # the rows' two buttons


def test_the_magic_flags_are_the_panel_starting_values(shell, fake_cpu, monkeypatch):
    from gpu_parallel_kit.notebook import panel as panel_module

    monkeypatch.setattr(panel_module, "slurm_partitions", lambda: [])
    line = (
        "panel mlp --backend jax --mesh 2x2 --experts dispatched --capacity-factor 2 "
        "--workers 3 --checkpointing selective --context 2 --sequence-parallel"
    )
    panel = shell.run_line_magic("gpk", line)
    assert isinstance(panel, Panel)
    for name, box in panel.controls.strategies.items():
        box.value = name in ("tensor", "expert", "data")
    controls = panel.controls.strategy_options.controls
    assert controls["mesh"].widget.value == (2, 2)
    assert controls["experts"].widget.value == "dispatched"
    assert controls["capacity_factor"].widget.value == "2.0"
    assert controls["workers"].widget.value == "3"
    assert controls["checkpointing"].widget.value == "selective"
    assert controls["context"].widget.value == "2"
    assert controls["sequence_parallel"].widget.value is True
    plan = panel.plan("run").request.plan()
    assert (plan["mesh"], plan["capacity_factor"], plan["context"]) == ((2, 2), 2.0, 2)
