"""Fixtures for the notebook front end: a real IPython shell, and a machine with 8 virtual CPUs.

The shell is IPython's own `InteractiveShell` (history off, its profile in the test's folder) with
the extension loaded and a publisher that keeps what was displayed, so tests assert on what a
user would see. `fake_cpu` patches the kit's one discovery seam, so tests that only plan runs
never start a worker.
"""

from __future__ import annotations

import pandas as pd
import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from gpu_parallel_kit.runs.description import device_choice
from gpu_parallel_kit.runs.description.device_choice import PhysicalDevice

CPU_ONLY = (
    PhysicalDevice(name="/physical_device:CPU:0", kind="cpu", index=0, description="2 cores"),
)


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """An InteractiveShell as a kernel has it, minus the kernel: %gpk loaded, displays kept."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("GPK_MAX_VIRTUAL", "8")
    config = Config()
    config.HistoryManager.enabled = False
    InteractiveShell.clear_instance()
    ipython = InteractiveShell.instance(config=config)
    ipython.display_pub = CapturingDisplayPublisher()
    ipython.run_line_magic("load_ext", "gpu_parallel_kit")
    yield ipython
    InteractiveShell.clear_instance()


@pytest.fixture
def fake_cpu(monkeypatch):
    """A CPU-only machine without asking a worker: discovery is the one seam
    (docs/ARCHITECTURE.md)."""
    monkeypatch.setattr(device_choice, "discover_physical_devices", lambda backend=None: CPU_ONLY)
    monkeypatch.setenv("GPK_MAX_VIRTUAL", "8")
    return device_choice.list_devices()


@pytest.fixture
def device_table() -> pd.DataFrame:
    return pd.DataFrame(
        [
            dict(
                index=i,
                name=f"/cpu:{i}",
                kind="cpu",
                description="virtual device on 2 cores",
                memory_bytes=None,
                virtual=True,
                physical="/physical_device:CPU:0",
            )
            for i in range(8)
        ]
    )
