"""Shared fixtures: every test gets its own working directory and run log."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_workdir(tmp_path, monkeypatch):
    """Runs write their log to the working directory; keep each test's apart."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPK_LOG", str(tmp_path / "gpk_runs.sqlite"))
    return tmp_path
