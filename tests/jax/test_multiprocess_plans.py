"""Runs over several processes, planned: who takes `workers=`, the whole mesh, the row's devices,
and which rows of each batch a worker feeds. No process is started."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.scheduling.comparison_grid import plan_grid
from gpu_parallel_kit.strategies.processes import process_share
from tests.builders import small_mlp_experiment

pytestmark = pytest.mark.usefixtures("fake_machine")


def test_a_jax_run_over_workers_spans_every_workers_devices():
    exp = small_mlp_experiment(backend="jax")
    spec = exp.plan("tensor", 2, workers=2, mesh=(2, 2))
    assert (spec.workers, spec.replicas, spec.mesh_shape) == (2, 4, (2, 2))
    assert spec.several_processes and spec.result_identity()["devices"] == 4
    assert exp.plan("fsdp", 1, workers=2).mesh_shape == (2, 1)
    assert exp.plan("multiworker", 1, workers=2).mode == "fit"
    assert not exp.plan("data", 2).several_processes


@pytest.mark.parametrize(
    ("backend", "strategy", "message"),
    [
        ("tensorflow", "pipeline", "over processes on backend='jax'.*'multiworker' on"),
        ("jax", "single", "strategy='single' does not run over several processes"),
        ("tensorflow", "data", "over processes on backend='jax'.*'multiworker' on"),
    ],
)
def test_workers_where_a_strategy_cannot_spread_is_one_sentence(backend, strategy, message):
    with pytest.raises(GpkError, match=message) as error:
        small_mlp_experiment(backend=backend).plan(strategy, 2, workers=2)
    assert "\n" not in str(error.value)


def test_a_pipeline_over_workers_cuts_every_workers_devices_into_stages():
    spec = small_mlp_experiment(backend="jax").plan(
        "pipeline", 1, workers=2, schedule="1f1b", micro_batches=4
    )
    assert (spec.workers, spec.replicas, spec.stages) == (2, 2, 2) and spec.several_processes
    assert process_share(spec.global_batch, 2, 1, 2, 1).rows == slice(0, spec.global_batch)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"micro_batches": "auto"}, "micro_batches='auto' picks M from timings each of the 2"),
        ({"balance": "time", "micro_batches": 2}, "balance='time' cuts the model where"),
    ],
)
def test_a_pipeline_over_workers_refuses_what_each_worker_would_time(option, message):
    with pytest.raises(GpkError, match=message):
        small_mlp_experiment(backend="jax").plan("pipeline", 1, workers=2, **option)


def test_a_comparison_gives_workers_to_multiworker_rows_only():
    exp = small_mlp_experiment(backend="jax")
    specs = plan_grid(exp.plan, ["data", "multiworker"], [1, 2], {"workers": 2, "backend": "jax"})
    workers = {(s.strategy, s.devices.count): s.workers for s in specs}
    assert workers == {("data", 1): 1, ("data", 2): 1, ("multiworker", 1): 2}


@pytest.mark.parametrize(
    ("devices", "data", "expected"),
    [
        (2, 2, [slice(0, 16), slice(16, 32)]),  # data: each worker its half
        (4, 2, [slice(0, 16), slice(16, 32)]),  # mesh 2x2: a data row per worker
        (4, 4, [slice(0, 16), slice(16, 32)]),  # mesh 4x1: two data rows per worker
        (2, 1, [slice(0, 32), slice(0, 32)]),  # mesh 1x2: the batch whole for both
        (4, 1, [slice(0, 32), slice(0, 32)]),
    ],
)
def test_each_worker_feeds_the_rows_its_devices_hold(devices, data, expected):
    assert [process_share(32, devices, data, 2, i).rows for i in (0, 1)] == expected


@pytest.mark.parametrize(
    ("devices", "data", "context", "rows", "chunks"),
    [
        (2, 2, 2, [slice(0, 32)] * 2, [range(0, 1), range(1, 2)]),  # context over the workers
        (4, 4, 2, [slice(0, 16), slice(16, 32)], [range(0, 2)] * 2),  # a replica per worker
        (4, 4, 4, [slice(0, 32)] * 2, [range(0, 2), range(2, 4)]),
        (4, 2, 2, [slice(0, 32)] * 2, [range(0, 1), range(1, 2)]),  # (1, 2, 2): model inside
        (8, 2, 2, [slice(0, 32)] * 2, [range(0, 1), range(1, 2)]),  # (1, 2, 4)
    ],
)
def test_each_worker_feeds_its_chunk_of_each_sequence(devices, data, context, rows, chunks):
    shares = [process_share(32, devices, data, 2, i, context) for i in (0, 1)]
    assert [s.rows for s in shares] == rows and [s.chunks for s in shares] == chunks
    assert shares[-1].positions(256) == slice(256 - 256 * len(chunks[-1]) // context, 256)


def test_a_worker_holding_part_of_one_row_and_all_of_another_is_one_sentence():
    with pytest.raises(GpkError, match="context=2 over 2 workers of 3 devices each"):
        process_share(32, 6, 6, 2, 0, 2)
