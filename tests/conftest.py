"""Shared fixtures: every test gets its own working directory and run log; `fake_machine` is a
CPU-only machine whose workers are stubbed, for tests of what happens around runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.builders import instant_result


@pytest.fixture(autouse=True)
def isolated_workdir(tmp_path, monkeypatch):
    """Runs write their log to the working directory; keep each test's apart."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPK_LOG", str(tmp_path / "gpk_runs.sqlite"))
    return tmp_path


class FakeMachine:
    """One CPU as the kit's discovery seam reports it, and `run_isolated` stubbed.

    Every spec the API hands to a worker is kept in `specs` and answered at once: by default with
    an "ok" row (`builders.instant_result`), after `answer(f)` with `f(spec)`, which may raise,
    and after `refuse()` by failing the test. Set `physical` to offer other devices, e.g. GPUs.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from gpu_parallel_kit import api
        from gpu_parallel_kit.runs import devices
        from gpu_parallel_kit.runs.devices import PhysicalDevice

        self.physical = (PhysicalDevice("/physical_device:CPU:0", "cpu", 0, "2 cores"),)
        self.specs: list[Any] = []
        self._answer: Callable[[Any], Any] = instant_result
        monkeypatch.setattr(devices, "discover_physical_devices", self._discover)
        monkeypatch.delenv("GPK_MAX_VIRTUAL", raising=False)
        monkeypatch.delenv("GPK_QUICK", raising=False)
        monkeypatch.setattr(api, "run_isolated", self._run)

    def answer(self, answer: Callable[[Any], Any]) -> None:
        self._answer = answer

    def refuse(self) -> None:
        self._answer = _refuse

    def _discover(self, backend: str | None = None) -> tuple[Any, ...]:
        return self.physical

    def _run(self, spec: Any, on_event: Any = None, cancel: Any = None) -> Any:
        self.specs.append(spec)
        return self._answer(spec)


def _refuse(spec: Any) -> Any:
    raise AssertionError(f"a worker was started for {spec.strategy}×{spec.devices.count}")


@pytest.fixture
def fake_machine(monkeypatch) -> FakeMachine:
    """A CPU-only machine whose workers answer at once (see FakeMachine)."""
    return FakeMachine(monkeypatch)
