"""A JAX run's devices, behind a faked `jax` module: no GPU is needed to check the GPU path."""

from __future__ import annotations

import sys
import types

import pytest

from gpu_parallel_kit.runs.description.device_choice import DevicePlan
from gpu_parallel_kit.worker.jax import device_setup


class FakeDevice:
    def __init__(self, platform: str, index: int, peak: int = 0) -> None:
        self.platform, self.id, self._peak = platform, index, peak
        self.device_kind = "NVIDIA A100-SXM4-40GB"

    def memory_stats(self):
        return {"peak_bytes_in_use": self._peak, "bytes_limit": 40 << 30}


@pytest.fixture
def fake_jax(monkeypatch):
    gpus = [FakeDevice("gpu", i, peak=(i + 1) << 20) for i in range(4)]
    module = types.SimpleNamespace(
        devices=lambda kind=None: gpus if kind == "gpu" else [FakeDevice("cpu", 0)],
        config=types.SimpleNamespace(update=lambda *args: None),
    )
    monkeypatch.setitem(sys.modules, "jax", module)
    for name in ("XLA_FLAGS", "JAX_PLATFORMS", "XLA_PYTHON_CLIENT_PREALLOCATE"):
        monkeypatch.delenv(name, raising=False)
    return gpus


def test_host_device_count_replaces_the_flag_and_keeps_the_users_others():
    flags = device_setup.host_device_flags(
        "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=8", 2
    )
    assert flags == "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=2"


def test_a_gpu_plan_takes_the_planned_gpus_and_allocates_memory_as_needed(fake_jax):
    plan = DevicePlan(kind="gpu", count=2, virtual=False, physical_indices=(1, 3))
    devices = device_setup.configure_jax_devices(plan)
    assert devices == [fake_jax[1], fake_jax[3]]
    assert device_setup.device_names(devices) == ("/gpu:1", "/gpu:3")
    import os

    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "JAX_PLATFORMS" not in os.environ  # the GPUs stay visible
    peaks, source = device_setup.peak_memory("gpu", devices)
    assert peaks == {"/gpu:1": 2 << 20, "/gpu:3": 4 << 20} and source == "gpu allocator peak"


def test_discovery_lists_the_gpus_jax_sees(fake_jax):
    found = device_setup.discover_with_jax()
    assert [d.kind for d in found] == ["cpu", "gpu", "gpu", "gpu", "gpu"]
    assert found[1].description == "NVIDIA A100-SXM4-40GB" and found[1].memory_bytes == 40 << 30


def _cache_settings(monkeypatch, **env) -> dict:
    """What `share_compilations` sets in JAX's config, under the environment `env`."""
    for name in ("GPK_JAX_CACHE", "GPK_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings: dict = {}
    jax = types.SimpleNamespace(config=types.SimpleNamespace(update=settings.__setitem__))
    device_setup.share_compilations(jax)
    return settings


def test_compilations_are_kept_in_the_users_cache_folder_with_a_bound(monkeypatch, tmp_path):
    settings = _cache_settings(monkeypatch, XDG_CACHE_HOME=str(tmp_path))
    folder = settings["jax_compilation_cache_dir"]
    assert folder == str(tmp_path / "gpu_parallel_kit" / "jax_compilations")
    assert settings["jax_compilation_cache_max_size"] == device_setup.JAX_CACHE_MAX_BYTES > 0
    home = _cache_settings(monkeypatch, HOME=str(tmp_path))["jax_compilation_cache_dir"]
    assert home == str(tmp_path / ".cache" / "gpu_parallel_kit" / "jax_compilations")


def test_the_kits_cache_folder_or_gpk_jax_cache_moves_it_and_off_keeps_none(monkeypatch, tmp_path):
    kits = _cache_settings(monkeypatch, GPK_CACHE_DIR=str(tmp_path))
    assert kits["jax_compilation_cache_dir"] == str(tmp_path / "jax_compilations")
    own = _cache_settings(monkeypatch, GPK_JAX_CACHE=str(tmp_path / "mine"))
    assert own["jax_compilation_cache_dir"] == str(tmp_path / "mine")
    assert _cache_settings(monkeypatch, GPK_JAX_CACHE="off") == {}


@pytest.mark.slow
def test_the_installed_jax_takes_every_cache_option():
    import jax

    for name in ("jax_compilation_cache_dir", "jax_compilation_cache_max_size"):
        assert name in jax.config.values, name
