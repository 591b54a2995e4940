"""What Slurm says, made one sentence, and what the kit asks it for: no Slurm needed.

The lines are Slurm 22.05's own, as srun, slurmstepd, salloc and sbatch print them.
"""

from __future__ import annotations

import collections
import pickle

import pytest

import gpu_parallel_kit as gpk
from gpu_parallel_kit.cluster.slurm.allocation import SlurmAllocation, is_slurm
from gpu_parallel_kit.cluster.slurm.commands import refusal
from gpu_parallel_kit.cluster.slurm.steps import step_ending
from gpu_parallel_kit.cluster.slurm.task import EVENT_MARK, EventLines, StepConnection
from gpu_parallel_kit.errors import GpkError

KILLED = "srun: error: localhost: task 1: Killed"
STEP_CANCELLED = (
    "slurmstepd-localhost: error: *** STEP 38.0 ON localhost CANCELLED AT 2026-12-04T08:20:53 ***"  # noqa: E501
)
TIME_LIMIT = "slurmstepd-localhost: error: *** STEP 44.0 ON localhost CANCELLED AT 2026-12-04T08:23:01 DUE TO TIME LIMIT ***"  # noqa: E501


@pytest.mark.parametrize(
    ("said", "ending"),
    [
        (
            [KILLED, STEP_CANCELLED],
            ("crashed", "task 1 was killed (SIGKILL), and Slurm ended the step", False),
        ),  # noqa: E501
        (
            [STEP_CANCELLED, "srun: error: localhost: task 0: Killed"],
            ("cancelled", "the Slurm job step 38.0 was cancelled (scancel)", True),
        ),  # noqa: E501
        (
            [TIME_LIMIT, "srun: error: localhost: task 0: Terminated"],
            ("timeout", "the Slurm allocation 44 reached its time limit", False),
        ),  # noqa: E501
        (
            ["srun: error: Node failure on localhost"],
            ("crashed", "the node localhost failed or was marked down", False),
        ),  # noqa: E501
        (
            ["srun: error: localhost: tasks 0-1: Exited with exit code 1"],
            (
                "crashed",
                "task 0-1 failed (exit code 1; its traceback is above), and Slurm ended the step",
                False,
            ),
        ),  # noqa: E501
        (["srun: Job step aborted"], None),
    ],
)
def test_what_slurm_said_is_one_sentence(said, ending):
    assert step_ending(said) == ending


@pytest.mark.parametrize(
    ("said", "sentence"),
    [
        (
            "sbatch: error: invalid partition specified: nowhere\nallocation failure: Invalid partition name specified",  # noqa: E501
            "Slurm refused the allocation R: invalid partition specified: nowhere; "
            "change partition",
        ),
        (
            "allocation failure: Requested node configuration is not available",
            "Slurm refused the allocation R: Requested node configuration is not available; "
            "change nodes, gpus_per_node or tasks_per_node",
        ),
        (
            "salloc: error: Job submit/allocate failed: Invalid account or account/partition combination specified",  # noqa: E501
            "Slurm refused the allocation R: Invalid account or account/partition combination "
            "specified; change account",
        ),
        (
            "sbatch: error: Invalid --time specification",
            "Slurm refused the allocation R: Invalid --time specification; change time",
        ),  # noqa: E501
    ],
)
def test_a_refusal_names_the_field_to_change(said, sentence):
    assert str(refusal(said, "the allocation R")) == sentence


def test_the_request_becomes_salloc_s_options():
    request = gpk.SlurmCluster(
        nodes=2, gpus_per_node=8, partition="gpu", time="00:30:00", account="lab", qos="high"
    )
    assert request.salloc_options() == [
        "--nodes=2",
        "--ntasks-per-node=8",
        "--time=00:30:00",
        "--job-name=gpk-allocation",
        "--gpus-per-node=8",
        "--partition=gpu",
        "--account=lab",
        "--qos=high",
    ]
    assert repr(request) == (
        "<SlurmCluster nodes=2 gpus_per_node=8 partition=gpu time=00:30:00 account=lab qos=high>"
    )


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"nodes": 0}, "nodes=0 must be a whole number >= 1"),
        ({"gpus_per_node": -1}, "gpus_per_node=-1 must be a whole number >= 0"),
        ({"time": ""}, "time='' must be a Slurm time limit"),
    ],
)
def test_a_bad_request_is_one_sentence(fields, said):
    with pytest.raises(GpkError, match=said):
        gpk.SlurmCluster(**fields)


def test_the_flag_s_text_form():
    assert gpk.SlurmCluster.from_text("slurm:nodes=2,partition=gpu,option=--exclusive") == (
        gpk.SlurmCluster(nodes=2, partition="gpu", options=("--exclusive",))
    )
    assert gpk.SlurmCluster.from_text("slurm") == gpk.SlurmCluster()
    assert is_slurm("slurm:nodes=1") and not is_slurm("cluster.json")
    with pytest.raises(GpkError, match="'gpus=2' in 'slurm:gpus=2' is not name=value"):
        gpk.SlurmCluster.from_text("slurm:gpus=2")


def test_a_step_larger_than_the_allocation_is_one_sentence():
    held = SlurmAllocation(gpk.SlurmCluster(nodes=1), job_id="7", nodes=("node1",))
    assert held.nodes_for(2) == 1
    with pytest.raises(GpkError, match="needs 2 nodes of 2 task slots, but the Slurm allocation 7"):
        held.nodes_for(4)


def test_an_allocation_travels_without_its_holder():
    held = SlurmAllocation(gpk.SlurmCluster(), job_id="7", nodes=("node1",), holder=object())
    travelled = pickle.loads(pickle.dumps(held))
    assert (travelled.job_id, travelled.nodes, travelled.holder) == ("7", ("node1",), None)


def test_events_cross_stdout_in_short_lines():
    class Stream:
        text = ""

        def write(self, text):
            self.text += text

        def flush(self):
            pass

    stream = Stream()
    event = {"event": "result", "result": {"reason": "x" * 5000}}
    StepConnection(stream).send(event)
    lines = stream.text.splitlines()
    assert len(lines) > 1 and all(len(line) < 1000 for line in lines)
    assert lines[-1].startswith(EVENT_MARK)
    reader = EventLines()
    read = [reader.read(line) for line in lines]
    assert read[-1] == (True, event)
    assert reader.read("an ordinary line") == (False, None)


def test_a_tasks_traceback_is_kept_on_the_row_not_printed_into_the_cell(capfd):
    # A surviving task's traceback after its peer was killed (a gloo all-reduce reset) is the
    # kit's to debug: the row keeps it, and the cell shows the row's sentence only.
    from gpu_parallel_kit.cluster.slurm.steps import TASK_STDERR_KEPT, _Step

    step = object.__new__(_Step)
    step.said, step.task_stderr = [], collections.deque(maxlen=TASK_STDERR_KEPT)
    step._err("0: Traceback (most recent call last):")
    step._err("0: jax.errors.JaxRuntimeError: INTERNAL: Gloo all-reduce failed")
    step._err(KILLED)
    assert capfd.readouterr() == ("", "")
    assert step.said == [KILLED]
    assert step._kept_stderr() == {
        "task_stderr": "0: Traceback (most recent call last):\n"
        "0: jax.errors.JaxRuntimeError: INTERNAL: Gloo all-reduce failed"
    }
