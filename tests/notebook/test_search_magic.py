"""`%gpk search`: the model and one sample named in the notebook, the cluster by flags, `Plans`
back; a mistake is one line. The counting child is stood in for."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError

from gpu_parallel_kit.planning import Plans, step_count

COUNT = {
    "flops": 4.7e7,
    "parameters": 218_496,
    "kept_bytes": 1.2e6,
    "by_layer": {},
    "structure": {"blocks": 4, "hidden": 64, "heads": 4, "block_names": [], "found_in": "x"},
}


@pytest.fixture
def counted(monkeypatch, tmp_path):
    calls = []

    def count(source, sample, policy, optimizer, progress, cancel=None):
        calls.append((source.name, sample.inputs))
        return dict(COUNT)

    monkeypatch.setenv("GPK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(step_count, "_count_in_child", count)
    monkeypatch.setattr(step_count, "_counted", {})
    return calls


def test_percent_gpk_search_returns_the_plans(shell, counted):
    shell.user_ns["build_gpt"] = lambda: None
    shell.user_ns["sample"] = {"token_ids": np.zeros(32, "int32")}
    line = "search build_gpt --inputs sample --device a100 --nodes 2 --global-batch 64"
    found = shell.run_line_magic("gpk", line)
    assert isinstance(found, Plans) and found.best.fits
    assert counted[0][1] == {"token_ids": ((32,), "int32")}
    assert found.cluster.gpus == 16 and found.global_batch == 64


def test_percent_gpk_search_refuses_bad_input_in_one_line(shell, counted):
    shell.user_ns["build_gpt"] = lambda: None
    with pytest.raises(UsageError, match="--global-batch is missing"):
        shell.run_line_magic("gpk", "search build_gpt --inputs 32:int32")
    with pytest.raises(UsageError, match="model 'nowhere' is not defined in this notebook"):
        shell.run_line_magic("gpk", "search nowhere --inputs 32:int32 --global-batch 8")
    assert counted == []
