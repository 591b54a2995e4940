"""Runs on a real Slurm (the one-node Slurm `.ci/slurm` starts): one allocation shared by the
module, each run an srun step inside it, and the faults Slurm itself brings, each one sentence.

Skipped, saying why, where no Slurm answers; CI starts one and fails when it cannot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.errors import GpkError
from tests.builders import dense_chain, largest_difference, saved_weights, small_data
from tests.cluster.slurm_faults import (
    cancel_steps,
    jobs,
    kill_one_task,
    node_lock,
    steps,
    when_training,
    why_no_slurm,
)

WHY = why_no_slurm()
# Real allocations, steps and processes: about 2 min on two shared cores.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]

TOLERANCE = 1e-5
LONG = dict(steps_per_epoch=40, epochs=200)  # trains until the fault ends it


def sgd_model():
    import keras

    return dense_chain([64, 64], keras.optimizers.SGD(learning_rate=0.01))


@pytest.fixture(scope="module", autouse=True)
def step_environment(tmp_path_factory):
    """A step's tasks are fresh interpreters: they import this suite's builders from the
    repository, as a host imports a user's module."""
    with node_lock(alone=False), pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(Path(__file__).parents[2]))
        folder = tmp_path_factory.mktemp("slurm")
        patch.chdir(folder)
        patch.setenv("GPK_LOG", str(folder / "gpk_runs.sqlite"))
        yield


@pytest.fixture(scope="module")
def allocation():
    with gpk.SlurmCluster(nodes=1, time="00:15:00") as held:
        yield held
    assert held.job_id not in jobs()


def experiment(**options):
    settings = {"batch_size": 32, "steps_per_epoch": 3, "progress": False, **options}
    return gpk.Experiment(sgd_model, small_data(), **settings)


@pytest.fixture(scope="module")
def comparison(allocation):
    exp = experiment()
    return exp.compare(
        ["single", "data", "multiworker"],
        [1],
        workers=2,
        cluster=allocation,
        backend=["tensorflow", "jax"],
        rounds=1,
    )


def test_every_row_of_both_backends_ran_as_a_step(comparison, allocation):
    table = comparison.table
    assert list(table["status"]) == ["ok"] * 6, list(table["reason"])
    assert set(table["backend"]) == {"tensorflow", "jax"}
    assert set(table["nodes"]) == {1}
    assert {r.extra["slurm_job"] for r in comparison.results} == {allocation.job_id}
    assert steps(allocation.job_id) == []


def test_multiworker_rows_span_two_tasks(comparison):
    rows = [r for r in comparison.results if r.strategy == "multiworker"]
    assert [(r.workers, r.devices) for r in rows] == [(2, 2), (2, 2)]
    for row in rows:
        digests = {w["weights_digest"] for w in row.extra["workers_detail"]}
        assert len(digests) == 1  # both tasks hold the same weights


def test_jax_tasks_join_by_jax_s_slurm_detection(comparison):
    row = next(r for r in comparison.results if r.strategy == "multiworker" and r.backend == "jax")
    assert row.extra["joined_by"] == "JAX's slurm detection"


def test_a_step_s_peak_memory_is_measured_as_a_local_run_s(comparison):
    """A task forks its run after importing the framework, as the local servers do: a task that
    imported TensorFlow itself kept every page of the import resident, twice a local run's peak."""
    for backend in ("tensorflow", "jax"):
        local = experiment(backend=backend).run(strategy="single", devices=1)
        on_slurm = next(
            r for r in comparison.results if r.strategy == "single" and r.backend == backend
        )
        difference = on_slurm.max_peak_memory_bytes - local.max_peak_memory_bytes
        assert abs(difference) < 100 * 2**20, (backend, difference)


def test_fsdp_over_two_tasks_trains_the_weights_of_one_device(allocation, tmp_path):
    exp = experiment(backend="jax")
    single = exp.run("single", 1, save_weights=str(tmp_path / "single.npz"))
    fsdp = exp.run(
        "fsdp",
        1,
        workers=2,
        min_shard_bytes=0,
        cluster=allocation,
        save_weights=str(tmp_path / "fsdp.npz"),
    )
    assert single.ok and fsdp.ok, (single.reason, fsdp.reason)
    assert (fsdp.workers, fsdp.nodes) == (2, 1)
    difference = largest_difference(
        saved_weights(tmp_path / "fsdp.npz"), saved_weights(tmp_path / "single.npz")
    )
    assert difference <= TOLERANCE


def test_a_killed_task_ends_the_row_in_one_sentence(allocation):
    exp = experiment(
        backend="jax", **LONG, progress=when_training(kill_one_task(allocation.job_id))
    )
    row = exp.run("multiworker", 1, workers=2, cluster=allocation, timeout=300)
    assert row.status == "crashed"
    assert "was killed (SIGKILL), and Slurm ended the step" in row.reason
    assert steps(allocation.job_id) == []


def test_a_cancelled_step_ends_the_row_in_one_sentence(allocation):
    exp = experiment(**LONG, progress=when_training(cancel_steps(allocation.job_id)))
    row = exp.run("single", 1, cluster=allocation, timeout=300)
    assert row.status == "cancelled"
    assert f"the Slurm job step {allocation.job_id}." in row.reason
    assert "was cancelled (scancel)" in row.reason
    assert steps(allocation.job_id) == []


def test_an_interrupt_cancels_the_step(allocation):
    def interrupt():
        raise KeyboardInterrupt

    exp = experiment(**LONG, progress=when_training(interrupt))
    with pytest.raises(KeyboardInterrupt):
        exp.run("single", 1, cluster=allocation, timeout=300)
    assert steps(allocation.job_id) == []
    assert gpk.history().iloc[-1]["status"] == "cancelled"


def test_a_run_larger_than_the_allocation_says_which_field_to_change(allocation):
    row = experiment(backend="jax").run("multiworker", 1, workers=4, cluster=allocation)
    assert row.status == "failed"
    assert "ask for more nodes= or tasks_per_node= in SlurmCluster" in row.reason


@pytest.mark.parametrize(
    ("request_", "said", "field"),
    [
        (dict(partition="nowhere"), "invalid partition specified: nowhere", "change partition"),
        (
            dict(tasks_per_node=512),
            "Requested node configuration is not available",
            "change nodes, gpus_per_node or tasks_per_node",
        ),
    ],
)
def test_slurm_s_refusal_names_the_field_to_change(request_, said, field):
    with pytest.raises(GpkError) as raised, gpk.SlurmCluster(time="00:05:00", **request_):
        pass
    message = str(raised.value)
    assert said in message and message.endswith(field)


def test_current_uses_the_allocation_the_process_runs_in(monkeypatch, allocation):
    monkeypatch.setenv("SLURM_JOB_ID", allocation.job_id)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "localhost")
    current = gpk.SlurmCluster.current()
    assert (current.job_id, current.nodes, current.holder) == (
        allocation.job_id,
        ("localhost",),
        None,
    )


def test_current_outside_an_allocation_says_how_to_get_one(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(GpkError, match="start it under salloc or sbatch"):
        gpk.SlurmCluster.current()


def test_the_magic_runs_in_the_allocation_it_names(monkeypatch, allocation, tmp_path):
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("SLURM_JOB_ID", allocation.job_id)  # as in a kernel started by salloc
    monkeypatch.setenv("SLURM_JOB_NODELIST", "localhost")
    config = Config()
    config.HistoryManager.enabled = False
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance(config=config)
    try:
        shell.run_line_magic("load_ext", "gpu_parallel_kit")
        row = shell.run_line_magic(
            "gpk", "run mlp --steps-per-epoch 3 --no-progress --cluster slurm:current"
        )
    finally:
        InteractiveShell.clear_instance()
    assert row.ok, row.reason
    assert row.extra["slurm_job"] == allocation.job_id
    assert allocation.state().state == "RUNNING"  # the kit never releases one it did not ask for


def test_list_devices_lists_each_node_of_the_allocation(allocation):
    table = gpk.list_devices(max_virtual=2, cluster=allocation)
    assert list(table["node"]) == ["localhost", "localhost"]
    assert list(table["name"]) == ["/cpu:0", "/cpu:1"]
