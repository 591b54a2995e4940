"""Shared fixtures: every test gets its own working directory and run log; `fake_machine` is a
CPU-only machine whose workers are stubbed, for tests of what happens around runs.

The fast subset (`-m "not slow"`) must leave TensorFlow and JAX unimported, in collection too:
a run of it that imports either fails, naming the test or module that did.
"""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.builders import instant_result

HEAVY = ("tensorflow", "jax")
FAST = "not slow"
# The environment the session started with, for the notebooks it executes: a notebook may start
# while any test runs, and none of a test's own settings (monkeypatch.setenv) may reach it. No
# server starts ahead of a notebook's runs, as none does of a test's (`isolated_workdir`).
SESSION_ENVIRONMENT = {**os.environ, "GPK_WARM": "0"}


class _HeavyImports:
    """A meta-path finder that finds nothing: it notes what was being collected or run when
    TensorFlow or JAX was first imported."""

    def __init__(self) -> None:
        self.now = "conftest.py"
        self.first: dict[str, str] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        root = name.partition(".")[0]
        if root in HEAVY and root not in self.first and root not in sys.modules:
            self.first[root] = self.now


_heavy = _HeavyImports()
sys.meta_path.insert(0, _heavy)


def pytest_collectstart(collector: pytest.Collector) -> None:
    _heavy.now = f"collecting {collector.nodeid or 'the session'}"


def pytest_runtest_setup(item: pytest.Item) -> None:
    _heavy.now = f"running {item.nodeid}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the fast subset, collected or run, if it imported TensorFlow or JAX."""
    if session.config.getoption("markexpr") != FAST:
        return
    heavy = [name for name in HEAVY if name in sys.modules]
    if not heavy:
        return
    when = [f"{name} while {_heavy.first.get(name, 'loading plugins')}" for name in heavy]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.line("")  # off the progress line
        reporter.write_sep("-", f"the fast subset imported {'; '.join(when)}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def isolated_workdir(tmp_path, monkeypatch):
    """Runs write their log to the working directory; keep each test's apart."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPK_LOG", str(tmp_path / "gpk_runs.sqlite"))
    # No server starts ahead of a test's runs: tests that stub the runner start none at all.
    monkeypatch.setenv("GPK_WARM", "0")
    # One round per configuration: tests of a comparison's rounds ask for them by rounds=.
    monkeypatch.setenv("GPK_ROUNDS", "1")
    return tmp_path


@pytest.fixture(autouse=True)
def no_counting_child(request, monkeypatch):
    """A fast test starts no counting child (a JAX process, seconds): one that projects a
    Comparison from `Experiment.compare` stubs `api.count_in_child` itself
    (tests/cli/test_demo.py)."""
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setattr("gpu_parallel_kit.api.count_in_child", _no_counting)


def _no_counting(spec: Any, batches: Any) -> Any:
    raise AssertionError(
        f"a fast test started the counting child for {spec.model.name}; stub "
        "gpu_parallel_kit.api.count_in_child with a stored count (tests/analysis/data)"
    )


class FakeMachine:
    """One CPU as the kit's discovery seam reports it, and `run_isolated` stubbed.

    Every spec the API hands to a worker is kept in `specs` and answered at once: by default with
    an "ok" row (`builders.instant_result`), after `answer(f)` with `f(spec)`, which may raise,
    and after `refuse()` by failing the test. Set `physical` to offer other devices, e.g. GPUs.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from gpu_parallel_kit import api
        from gpu_parallel_kit.runs.description import device_choice
        from gpu_parallel_kit.runs.description.device_choice import PhysicalDevice

        self.physical = (PhysicalDevice("/physical_device:CPU:0", "cpu", 0, "2 cores"),)
        self.specs: list[Any] = []
        self._answer: Callable[[Any], Any] = instant_result
        monkeypatch.setattr(device_choice, "discover_physical_devices", self._discover)
        monkeypatch.delenv("GPK_MAX_VIRTUAL", raising=False)
        monkeypatch.delenv("GPK_QUICK", raising=False)
        monkeypatch.setattr(api, "run_isolated", self._run)

    def answer(self, answer: Callable[[Any], Any]) -> None:
        self._answer = answer

    def refuse(self) -> None:
        self._answer = _refuse

    def _discover(self, backend: str | None = None) -> tuple[Any, ...]:
        return self.physical

    def _run(self, spec: Any, on_event: Any = None, cancel: Any = None, **ahead: Any) -> Any:
        self.specs.append(spec)
        return self._answer(spec)


def _refuse(spec: Any) -> Any:
    raise AssertionError(f"a worker was started for {spec.strategy}×{spec.devices.count}")


@pytest.fixture
def fake_machine(monkeypatch) -> FakeMachine:
    """A CPU-only machine whose workers answer at once (see FakeMachine)."""
    return FakeMachine(monkeypatch)


@pytest.fixture
def no_workers(fake_machine: FakeMachine) -> FakeMachine:
    """The fake machine, on which starting a worker fails the test: for tests of what is refused
    or planned before any run (`pytestmark = pytest.mark.usefixtures("no_workers")`)."""
    fake_machine.refuse()
    return fake_machine


@pytest.fixture(scope="session")
def executed_notebooks(request, tmp_path_factory) -> Any:
    """The notebooks executed once per session (tests/executed_notebooks.py): a function from a
    notebook's path to its executed copy. Only the notebooks this session's tests ask for are
    executed: one test's own, or all of them for a test that reads every one."""
    from tests.executed_notebooks import NOTEBOOKS, ExecutedNotebooks

    ready = os.environ.get("GPK_EXECUTED_NOTEBOOKS")  # a folder of copies executed before
    if ready:
        yield lambda path: pathlib.Path(ready) / path.name
        return
    wanted: set = set()
    for item in request.session.items:
        if "executed_notebooks" in getattr(item, "fixturenames", ()):
            callspec = getattr(item, "callspec", None)
            wanted |= (
                {callspec.params["path"]}
                if callspec and "path" in callspec.params
                else {*NOTEBOOKS}
            )
    executed = ExecutedNotebooks(
        tmp_path_factory.mktemp("executed_notebooks"),
        [p for p in NOTEBOOKS if p in wanted],
        SESSION_ENVIRONMENT,
    )
    yield executed
    executed.close()


@pytest.fixture
def notebooks_started_ahead(request) -> None:
    """Start the session's notebooks (`executed_notebooks`) now, beside a test that mostly
    waits, where the session has tests that read them; nothing otherwise."""
    if any("executed_notebooks" in getattr(i, "fixturenames", ()) for i in request.session.items):
        executed = request.getfixturevalue("executed_notebooks")
        if hasattr(executed, "start"):  # not copies executed before (GPK_EXECUTED_NOTEBOOKS)
            executed.start()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "after_notebooks: runs after tests/test_notebooks.py, on its executed copies"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The browser's look at the executed notebooks runs after the tests that execute them, so it
    reads their copies instead of executing again (or waiting past its timeout)."""
    last = [item for item in items if item.get_closest_marker("after_notebooks")]
    items[:] = [item for item in items if item not in last] + last
