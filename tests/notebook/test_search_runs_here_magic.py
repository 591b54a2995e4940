"""`%gpk search --run-here` and `--compare-here`: the leading plans run here on the notebook's
data after the search, as the panel's plan tab runs them. The counting child and the plan runs
are stood in for."""

from __future__ import annotations

import numpy as np
import pytest
from IPython.core.error import UsageError

from tests.cli.test_search_command import counted  # noqa: F401 - a fixture
from tests.cli.test_search_runs_here import plan_runs  # noqa: F401 - a fixture


def test_percent_gpk_search_runs_here_on_the_notebook_data(shell, counted, plan_runs):  # noqa: F811
    shell.user_ns["x"] = np.zeros((64, 32), "float32")
    shell.user_ns["y"] = np.zeros(64, "int32")
    line = "search mlp --inputs 32 --device a100 --nodes 2 --global-batch 64"
    shown = shell.run_line_magic("gpk", f"{line} --compare-here 2 --data x y --backend jax")
    ((what, plans, devices, batch, backend),) = plan_runs
    assert (what, len(plans), backend) == ("compare_plans", 2, "jax")
    assert [r.run_id for r in shown.results] == ["r0", "r1"]
    with pytest.raises(UsageError, match="--data nowhere is not defined in this notebook"):
        shell.run_line_magic("gpk", f"{line} --run-here 1 --data nowhere")
