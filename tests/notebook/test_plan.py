"""`gpk plan` and `%gpk plan`: the memory planner from both front ends, nothing trained."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

import gpu_parallel_kit as gpk
from gpu_parallel_kit.cli.commands import main


def test_the_planner_is_public():
    assert "plan_memory" in gpk.__all__
    totals = gpk.plan_memory(params=7.5e9, devices=64).set_index("strategy")["total_bytes"]
    assert round(totals["fsdp"] / 1e9, 1) == 1.9


def test_gpk_plan_prints_the_table(capsys):
    assert main(["plan", "--params", "7.5e9", "--devices", "64", "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "7,500,000,000 parameters" in out and "ZeRO" in out
    lines = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "120.00" in lines["data"] and " no " in lines["data"]
    assert "31.41" in lines["zero-1"] and "modelled only" in lines["zero-1"]
    assert "16.64" in lines["zero-2"] and "1.88" in lines["fsdp"]


def test_percent_gpk_plan_returns_the_table(shell):
    table = shell.run_line_magic("gpk", "plan --params 7e9 --devices 8 64 --gpu h100")
    assert set(table["devices"]) == {8, 64}
    assert not table.set_index(["strategy", "devices"])["fits"][("data", 8)]


def test_percent_gpk_plan_refuses_bad_input_in_one_line(shell):
    with pytest.raises(UsageError, match="optimizer='adamax' is not known"):
        shell.run_line_magic("gpk", "plan --params 7e9 --optimizer adamax")
