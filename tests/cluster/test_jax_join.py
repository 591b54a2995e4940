"""How a JAX worker joins: decided on the host's environment alone, without Slurm or JAX."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpu_parallel_kit.cluster.jax_join import check_joined, join_plan
from gpu_parallel_kit.errors import GpkError

NAMED = ("node1:23456", "node2:23456")
LOCAL = ("127.0.0.1:4000", "127.0.0.1:4001")
KERAS = {
    "KERAS_DISTRIBUTION_JOB_ADDRESSES": "node7:1234,node8:1234",
    "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
    "KERAS_DISTRIBUTION_PROCESS_ID": "1",
}


def test_a_named_cluster_joins_by_its_file_listening_on_every_interface():
    plan = join_plan({}, NAMED, 1, named=True, detected=None)
    assert plan.arguments() == dict(
        coordinator_address="node1:23456", num_processes=2, process_id=1
    )
    assert plan.source == "the cluster file"


def test_a_loopback_coordinator_listens_on_loopback_only():
    plan = join_plan({}, LOCAL, 0, named=True, detected=None)
    assert plan.arguments()["coordinator_bind_address"] == "127.0.0.1:4000"


def test_local_workers_ignore_the_launcher_that_started_this_machine():
    plan = join_plan(KERAS, LOCAL, 1, named=False, detected="slurm")
    assert plan.arguments() == dict(
        coordinator_address="127.0.0.1:4000",
        num_processes=2,
        process_id=1,
        coordinator_bind_address="127.0.0.1:4000",
    )


def test_a_launcher_jax_detects_leaves_coordinator_count_and_id_to_jax():
    plan = join_plan({"SLURM_PROCID": "1"}, NAMED, 1, named=True, detected="slurm")
    assert plan.arguments() == {}
    assert plan.source == "JAX's slurm detection"


def test_keras_variables_win_over_detection_and_name_the_coordinator():
    plan = join_plan(KERAS, NAMED, 1, named=True, detected="slurm")
    assert (plan.coordinator, plan.processes, plan.process_id) == ("node7:1234", 2, 1)
    assert plan.bind is None and plan.source == "KERAS_DISTRIBUTION_* variables"


@pytest.mark.parametrize(
    "change, said",
    [
        ({"KERAS_DISTRIBUTION_PROCESS_ID": ""}, "but not KERAS_DISTRIBUTION_PROCESS_ID"),
        ({"KERAS_DISTRIBUTION_PROCESS_ID": "0"}, "disagree with the cluster file's 2 workers"),
        ({"KERAS_DISTRIBUTION_NUM_PROCESSES": "two"}, "'two' is not a whole number"),
        ({"KERAS_DISTRIBUTION_JOB_ADDRESSES": "node7"}, "'node7' is not host:port"),
    ],
)
def test_keras_variables_that_cannot_work_are_one_sentence(change, said):
    with pytest.raises(GpkError, match=said):
        join_plan({**KERAS, **change}, NAMED, 1, named=True, detected=None)


def test_a_detected_process_id_other_than_the_index_is_one_sentence():
    plan = join_plan({}, NAMED, 1, named=True, detected="slurm")
    check_joined(plan, 2, 1, workers=2, index=1)
    with pytest.raises(GpkError, match=r"process 0 of 2, .* --index \$SLURM_PROCID"):
        check_joined(plan, 2, 0, workers=2, index=1)


def test_jax_detects_slurm_from_its_variables_alone():
    # In a child: JAX stays out of the test process, whose other tests start TensorFlow workers.
    slurm = dict(
        SLURM_JOB_ID="42", SLURM_STEP_NODELIST="node[1-2]", SLURM_NTASKS="2",
        SLURM_PROCID="1", SLURM_LOCALID="0",
    )  # fmt: skip
    ask = "from gpu_parallel_kit.worker.jax.joining import detected_launcher as d; print(d())"
    plain = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_"))}
    said = [
        subprocess.run(
            [sys.executable, "-c", ask], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        for env in ({**plain, **slurm}, plain)
    ]
    assert said == ["slurm", "None"]
