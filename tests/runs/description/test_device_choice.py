"""Device choice on plain descriptions of machines: the one discovery seam is patched."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.description import device_choice
from gpu_parallel_kit.runs.description.device_choice import PhysicalDevice, plan_devices

CPU = PhysicalDevice("/physical_device:CPU:0", "cpu", 0, "2 cores")


def gpus(n, memory=16 << 30):
    return [
        PhysicalDevice(f"/physical_device:GPU:{i}", "gpu", i, "Fake GPU", memory) for i in range(n)
    ]


def test_cpu_machine_gets_virtual_cpu_devices():
    plan = plan_devices(4, [CPU], max_virtual=8)
    assert (plan.kind, plan.count, plan.virtual, plan.per_physical) == ("cpu", 4, True, 4)
    assert plan.logical_names == ("/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3")


def test_one_cpu_device_is_not_virtual():
    assert not plan_devices(1, [CPU], max_virtual=8).virtual


def test_enough_gpus_are_used_as_they_are():
    plan = plan_devices([1, 3], [CPU, *gpus(4)])
    assert (plan.kind, plan.virtual, plan.physical_indices) == ("gpu", False, (1, 3))


def test_too_few_gpus_are_split_into_virtual_gpus_with_memory_divided():
    plan = plan_devices(4, [CPU, *gpus(1, memory=8 << 30)], max_virtual=8)
    assert (plan.kind, plan.virtual, plan.per_physical) == ("gpu", True, 4)
    assert plan.memory_per_logical_bytes == int((8 << 30) * 0.9) // 4


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (0, "devices=0 is too few; use devices=1 or more"),
        ([], "names no device"),
        ([0, 0], "names a device twice"),
        ([0, 9], "device index 9 is out of range"),
        (16, "devices=16 is more than the 8 devices"),
    ],
)
def test_bad_device_choices_say_what_to_do(request_, message):
    with pytest.raises(GpkError, match=message):
        plan_devices(request_, [CPU], max_virtual=8)


def test_devices_must_be_a_count_or_indices():
    with pytest.raises(TypeError, match="count like 2"):
        plan_devices("2", [CPU])


def test_list_devices_offers_virtual_cpu_devices(monkeypatch):
    monkeypatch.setattr(device_choice, "discover_physical_devices", lambda backend=None: (CPU,))
    table = device_choice.list_devices(max_virtual=4)
    assert list(table["name"]) == ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]
    assert table["virtual"].all()


def test_list_devices_shows_real_gpus(monkeypatch):
    monkeypatch.setattr(
        device_choice, "discover_physical_devices", lambda backend=None: (CPU, *gpus(8))
    )
    table = device_choice.list_devices()
    assert len(table) == 8 and not table["virtual"].any()
    assert set(table["memory_bytes"]) == {16 << 30}


def test_virtual_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("GPK_MAX_VIRTUAL", "two")
    with pytest.raises(GpkError, match="GPK_MAX_VIRTUAL='two'"):
        device_choice.virtual_device_limit()


@pytest.mark.slow
def test_discovery_and_runs_keep_tensorflow_out_of_the_caller():
    """Checked in a fresh interpreter: this one may already run TensorFlow for other tests."""
    code = (
        "import sys, gpu_parallel_kit as gpk\n"
        "table = gpk.list_devices()\n"
        "exp = gpk.Experiment(model='mlp', samples=512, steps_per_epoch=2, progress=False)\n"
        "assert exp.run(strategy='data', devices=2).ok\n"
        "print(len(table), 'tensorflow' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rows, imported = out.stdout.split()
    assert int(rows) >= 1 and imported == "False"


def test_tensorflow_discovery_leaves_the_runtime_unstarted():
    code = (
        "import tensorflow as tf\n"
        "from gpu_parallel_kit.worker.tensorflow.device_setup import discover_with_tensorflow\n"
        "print(discover_with_tensorflow()[0].kind)\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "virtual = [tf.config.LogicalDeviceConfiguration()] * 2\n"
        "tf.config.set_logical_device_configuration(cpu, virtual)\n"
        "print(len(tf.config.list_logical_devices('CPU')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["cpu", "2"]  # the layout could still be chosen after discovery
