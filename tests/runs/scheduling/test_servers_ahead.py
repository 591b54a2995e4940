"""Servers started ahead (runs/scheduling/servers_ahead.py), a run that waits for the warming
discovery instead of asking again, and a server that dies while it starts a child (retried once,
else a row)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit import runner
from gpu_parallel_kit.backends import TENSORFLOW
from gpu_parallel_kit.runs.description import device_choice
from gpu_parallel_kit.runs.processes import child_process
from gpu_parallel_kit.runs.scheduling import servers_ahead


@pytest.fixture
def warming(monkeypatch):
    """Warming on, with the server start and discovery stubbed: (backends warmed, discoveries)."""
    monkeypatch.setenv("GPK_WARM", "1")
    monkeypatch.setattr(servers_ahead, "_warming", {})
    started: list[str] = []
    monkeypatch.setattr(servers_ahead, "start_server", started.append)
    return started


def test_nothing_starts_on_a_bare_import():
    code = (
        "import threading, multiprocessing.forkserver as f, gpu_parallel_kit as gpk\n"
        "gpk.history()\n"
        "print(sorted(t.name for t in threading.enumerate()), f._forkserver._forkserver_pid)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['MainThread'] None"


def test_gpk_warm_0_turns_warming_off(monkeypatch):
    monkeypatch.setenv("GPK_WARM", "0")
    assert servers_ahead.warm("tensorflow") is None


def test_an_experiment_warms_its_backend_once(warming, fake_machine):
    for _ in range(2):
        gpk.Experiment(model="mlp", data="tabular", samples=256, batch_size=64)
    for thread in list(servers_ahead._warming.values()):
        thread.join(5)
    assert warming == ["tensorflow"]


@contextlib.contextmanager
def _discovering_with(monkeypatch, discovery):
    """Devices discovered by `discovery(entry)` instead of a worker; no answer cached before or
    after the block."""
    monkeypatch.setattr(device_choice, "call_in_worker", lambda entry, **_: discovery(entry))
    device_choice._discover.cache_clear()
    try:
        yield
    finally:
        device_choice._discover.cache_clear()


def test_a_run_arriving_during_the_warming_discovery_waits_for_its_answer(monkeypatch):
    asked = []

    def slow_discovery(backend):
        asked.append(backend)
        time.sleep(0.3)
        return (device_choice.host_cpu(),)

    with _discovering_with(monkeypatch, slow_discovery):
        warming_thread = threading.Thread(
            target=device_choice.discover_physical_devices, args=("jax",)
        )
        warming_thread.start()
        time.sleep(0.05)
        assert device_choice.discover_physical_devices("jax") == (device_choice.host_cpu(),)
        warming_thread.join()
    assert len(asked) == 1


def test_a_jax_discovery_does_not_wait_for_tensorflows(monkeypatch):
    """After `%load_ext`, TensorFlow's server imports TensorFlow while a JAX experiment's run
    asks JAX for its devices: the JAX answer comes without waiting for TensorFlow's."""
    tensorflow_may_answer = threading.Event()

    def discovery(entry):
        if entry == TENSORFLOW.discovery_entry:  # TensorFlow's, held until the JAX one is back
            assert tensorflow_may_answer.wait(10)
        return (device_choice.host_cpu(),)

    with _discovering_with(monkeypatch, discovery):
        warming = threading.Thread(
            target=device_choice.discover_physical_devices, args=("tensorflow",)
        )
        warming.start()
        time.sleep(0.05)
        answered = []
        asking = threading.Thread(
            target=lambda: answered.append(device_choice.discover_physical_devices("jax"))
        )
        asking.start()
        asking.join(5)
        answered_before_tensorflow = list(answered)
        tensorflow_may_answer.set()
        warming.join(10)
        asking.join(10)
    assert answered_before_tensorflow == [(device_choice.host_cpu(),)]


def _stand_in_child(entry, args, name, backend):
    return "process", "receiver"


def test_a_server_that_dies_while_starting_a_child_is_started_again_once(monkeypatch):
    calls = []

    def dies_once(*args):
        calls.append(args)
        if len(calls) == 1:
            raise EOFError  # what popen_forkserver.read_signed raises when the server is killed
        return _stand_in_child(*args)

    monkeypatch.setattr(child_process, "_start_child", dies_once)
    assert child_process.start_child("m:f", backend="tensorflow") == ("process", "receiver")
    assert len(calls) == 2


def test_a_server_that_dies_twice_gives_the_run_a_row_with_one_sentence(monkeypatch, fake_machine):
    def always_dies(*args):
        raise EOFError

    monkeypatch.setattr(child_process, "_start_child", always_dies)
    spec = gpk.Experiment(model="mlp", data="tabular", samples=256, batch_size=64).plan("single")
    result = runner.run_isolated(spec)
    assert result.status == "crashed"
    assert "could not be started, twice" in result.reason and "EOFError" in result.reason
    assert "\n" not in result.reason


def test_a_warming_child_whose_caller_has_gone_ends_without_a_word(monkeypatch, capsys):
    class Gone:
        def send(self, answer):
            raise BrokenPipeError(32, "Broken pipe")

        def close(self):
            pass

    def exit_now(code):
        raise SystemExit(code)

    monkeypatch.setattr(child_process.os, "_exit", exit_now)
    monkeypatch.setattr(child_process, "entry_point", lambda entry: lambda: "answer")
    with pytest.raises(SystemExit):
        child_process.call_and_send("anything:at_all", Gone())
    printed = capsys.readouterr()
    assert printed.out == printed.err == ""


def test_a_bare_import_leaves_pandas_and_matplotlib_unimported():
    code = (
        "import sys, gpu_parallel_kit as gpk\n"
        "print(sorted(m for m in ('pandas', 'matplotlib') if m in sys.modules), gpk.__version__)\n"
        "gpk.Experiment\n"
        "print('pandas' in sys.modules, sorted(n for n in dir(gpk) if not n.startswith('_')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    bare, asked = out.stdout.strip().splitlines()
    assert bare.startswith("[] ")
    public = [name for name in gpk.__all__ if not name.startswith("_")]
    assert asked.startswith("True ") and all(name in asked for name in public)


@pytest.mark.parametrize(
    ("argv", "backends"),
    [
        (["demo"], ["jax"]),  # JAX is installed beside TensorFlow here: the demo takes it
        (["demo", "--backend", "tensorflow"], ["tensorflow"]),
        (["compare", "--backend", "tensorflow", "jax", "--devices", "2"], ["tensorflow", "jax"]),
        (["run", "--model", "mlp", "--backend=jax"], ["jax"]),
        (["run", "--strategy", "data"], [None]),  # the default backend
        (["history"], []),
        (["demo", "--help"], []),
    ],
)
def test_gpk_reads_the_backends_it_will_start_from_its_arguments_alone(argv, backends):
    from gpu_parallel_kit.cli.launch import backends_for

    assert backends_for(argv) == backends


def test_gpk_starts_its_servers_before_it_imports_the_command_line(monkeypatch):
    import gpu_parallel_kit.cli as cli
    import gpu_parallel_kit.cli.commands as commands

    started = []
    monkeypatch.setattr(servers_ahead, "warm", lambda backend=None: started.append(backend))
    monkeypatch.setattr(commands, "main", lambda argv: started.append(("ran", argv)) or 0)
    assert cli.main(["compare", "--backend", "jax"]) == 0
    assert started == ["jax", ("ran", ["compare", "--backend", "jax"])]
