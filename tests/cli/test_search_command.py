"""`gpk search`: the cluster named with flags, one sample's shapes, the leading plans printed;
every mistake one line before anything is counted. The counting child is stood in for."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.cli.commands import main
from gpu_parallel_kit.planning import step_count

CLUSTER = ["--device", "a100", "--nodes", "2", "--per-node", "8", "--inside", "nvlink3",
           "--between", "net400g"]  # fmt: skip
SAMPLE = ["--inputs", "token_ids=32:int32", "padding_mask=32:int32"]
COUNT = {
    "flops": 4.7e7,
    "parameters": 218_496,
    "kept_bytes": 1.2e6,
    "by_layer": {},
    "structure": {"blocks": 4, "hidden": 64, "heads": 4, "block_names": [], "found_in": "x"},
}


def build():  # named as tests.cli.test_search_command:build; the stand-in never calls it
    raise AssertionError("built in the counting child only")


@pytest.fixture
def counted(monkeypatch, tmp_path):
    calls = []

    def count(source, sample, policy, optimizer, progress, cancel=None):
        calls.append(sample.inputs)
        return dict(COUNT)

    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(step_count, "_count_in_child", count)
    monkeypatch.setattr(step_count, "_counted", {})
    return calls


def test_gpk_search_prints_the_leading_plans(capsys, counted):
    argv = ["search", "--model", "tests.cli.test_search_command:build", *SAMPLE, *CLUSTER]
    assert main([*argv, "--global-batch", "64", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Plans for tests.cli.test_search_command.build on 2x8 a100")
    assert "The best plan, data " in out
    table = out.split("\n")[1:5]
    assert table[0].split()[:3] == ["data", "tensor", "stages"] and len(table[3].split()) > 5
    assert counted == [{"token_ids": ((32,), "int32"), "padding_mask": ((32,), "int32")}]


def test_gpk_search_times_the_plans_under_the_stack_named(capsys, counted):
    argv = ["search", "--model", "tests.cli.test_search_command:build", *SAMPLE, *CLUSTER]
    assert main([*argv, "--global-batch", "64", "--stack", "megatron-lm-2021"]) == 0
    assert "under megatron-lm-2021" in capsys.readouterr().out.split("\n")[0]
    assert main([*argv, "--global-batch", "64", "--stack", "megatron-9"]) != 0
    assert "--stack" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        ([*SAMPLE, *CLUSTER], "--global-batch is missing"),
        ([*CLUSTER, "--global-batch", "64"], "--inputs is missing"),
        (["--inputs", "ids=32:int32", "8", "--global-batch", "64"], "named and unnamed"),
        (["--inputs", "ids=a:b", "--global-batch", "64"], "is not NAME=SHAPE[:DTYPE]"),
        ([*SAMPLE, "--device", "a101", "--global-batch", "64"], "device preset 'a101'"),
        ([*SAMPLE, "--precision", "int8", "--global-batch", "64"], "--precision"),
    ],
)
def test_mistakes_are_one_line_before_any_count(capsys, counted, argv, message):
    assert main(["search", "--model", "tests.cli.test_search_command:build", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpk: error: ") and message in err and err.count("\n") == 1
    assert counted == []


def test_gpk_search_plans_attention_as_written_when_asked(capsys, counted):
    argv = ["search", "--model", "tests.cli.test_search_command:build", *SAMPLE, *CLUSTER]
    assert main([*argv, "--global-batch", "64", "--attention", "as-written"]) == 0
    out = capsys.readouterr().out
    assert "as-written" in out.split("\n")[2] and "flash" not in out.split("\n")[2]
    assert main([*argv, "--global-batch", "64", "--attention", "fused"]) == 2
    assert "--attention" in capsys.readouterr().err
