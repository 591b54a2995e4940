"""`%gpk run` takes `--mesh` with `--strategy pipeline` on JAX, and refuses a mesh the devices
cannot hold in one line, before any run."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError


def test_the_magic_refuses_a_mesh_that_does_not_divide_the_devices(shell, no_workers):
    with pytest.raises(UsageError) as refused:
        shell.run_line_magic(
            "gpk", "run mlp --strategy pipeline --backend jax --devices 8 --mesh 3x1"
        )
    assert "does not divide the run's 8" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_magics_help_offers_the_mesh_for_a_pipeline(shell, capsys):
    assert shell.run_line_magic("gpk", "run --help") is None
    out = capsys.readouterr().out
    assert "--mesh" in out and "--stages" in out
