"""`gpk run` takes `--mesh` and `--stages` with `--strategy pipeline` on JAX: the
flags reach the run's plan, and a mesh the devices or the backend cannot hold is one sentence
before any run."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.cli.commands import main
from tests.builders import instant_result

PIPELINE_ON_JAX = ["run", "--strategy", "pipeline", "--backend", "jax", "--no-progress"]


def test_mesh_and_stages_reach_the_pipelines_plan(capsys, fake_machine):
    fake_machine.answer(instant_result)
    argv = [*PIPELINE_ON_JAX, "--devices", "8", "--mesh", "2x2", "--stages", "2"]
    assert main([*argv, "--schedule", "1f1b", "--micro-batches", "4"]) == 0
    spec = fake_machine.specs[0]
    assert (spec.mesh, spec.stages, spec.schedule, spec.micro_batches) == ((2, 2), 2, "1f1b", 4)
    assert spec.result_identity()["mesh"] == "2x2"


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--devices", "8", "--mesh", "3x1"], "does not divide the run's 8"),
        (["--devices", "8", "--mesh", "2x2", "--stages", "3"], "stages=3"),
        (["--devices", "8", "--mesh", "2x2", "--backend", "tensorflow"], "backend='jax'"),
        (["--devices", "8", "--mesh", "2x2", "--micro-batches", "4", "--batch-size", "36"],
         "data axis"),
        (["--devices", "8", "--mesh", "2x2", "--micro-batches", "auto"], "data axis of 2"),
    ],
)  # fmt: skip
def test_a_mesh_that_cannot_hold_the_run_is_one_line(flags, named, capsys, no_workers):
    assert main([*PIPELINE_ON_JAX, *flags]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpk: error: ") and named in lines[0]
