"""Projected pipelines take micro-batch efficiency from the GPU's roofline and launch floor at
the micro-batch size, not from the CPU's measured curve."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.projected_rows import ProjectionOptions, project_results
from gpu_parallel_kit.analysis.cost_model.roofline import LAUNCH_S
from tests.analysis.cost_model.test_projected_compute import MLP, RESNET, single


def pipeline_step(work, base, m: int) -> float:
    rows = project_results(
        [base],
        "nvlink4",
        [4],
        ProjectionOptions(
            strategies=["pipeline"],
            schedule="gpipe",
            micro_batches=m,
            cut_bytes_per_sample=1024.0,
            work={"e1": work},
            device="h100",
        ),
    )
    (row,) = [r for r in rows if r.strategy == "pipeline"]
    return row.step_time_s


def test_a_launch_bound_model_pays_the_launch_floor_once_per_micro_batch():
    # The MLP's whole step is launch-bound on an H100: each micro-batch launches every kernel
    # of its stage again, so 8 micro-batches cost about 8 floors, not one shared eighth.
    base = single()
    one, eight = pipeline_step(MLP, base, 1), pipeline_step(MLP, base, 8)
    assert eight > 2 * one
    assert eight >= 8 * MLP.kernels * LAUNCH_S / 4  # M floors of a quarter of the kernels


def test_a_compute_bound_model_keeps_its_per_sample_cost_and_pipelining_pays():
    base = single(step=5.0, batch=256, params=25_583_592 * 4)
    one, eight = pipeline_step(RESNET, base, 1), pipeline_step(RESNET, base, 8)
    assert eight < 0.5 * one  # the bubble shrinks from 3/4 to 3/11, a sample costs the same
    assert eight == pytest.approx(one * (8 + 3) / (8 * 4), rel=0.1)
