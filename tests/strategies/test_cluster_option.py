"""`cluster=` on the strategies that spread over processes: the file's hosts decide the worker
count, and where the strategy cannot spread over hosts the run is one sentence. No process is
started."""

from __future__ import annotations

import json

import pytest

from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.runs.scheduling.comparison_grid import plan_grid
from tests.builders import small_mlp_experiment

pytestmark = pytest.mark.usefixtures("fake_machine")


@pytest.fixture
def cluster_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GPK_CLUSTER_KEY", "secret")
    path = tmp_path / "cluster.json"
    workers = ["node1:23456", "node2:23456", "node3:23456"]
    path.write_text(json.dumps({"worker": workers, "coordinator": "node0:23400"}))
    return str(path)


@pytest.mark.parametrize("strategy", ["data", "fsdp", "tensor", "multiworker"])
def test_a_jax_run_on_a_named_cluster_spans_its_hosts(cluster_file, strategy):
    spec = small_mlp_experiment(backend="jax", batch_size=48).plan(
        strategy, 1, cluster=cluster_file
    )
    assert (spec.workers, spec.replicas, spec.several_processes) == (3, 3, True)
    assert spec.cluster.workers[0] == "node1:23456"


@pytest.mark.parametrize(
    ("backend", "strategy", "given", "message"),
    [
        ("tensorflow", "data", {}, "cluster= spreads strategy='data' over hosts on backend='jax'"),
        ("jax", "fsdp", {"workers": 2}, "workers=2 but the cluster .* lists 3"),
        ("jax", "pipeline", {}, "strategy='pipeline' does not run over several hosts"),
        ("jax", "single", {}, "strategy='single' does not run over several hosts"),
    ],
)
def test_a_cluster_where_it_cannot_work_is_one_sentence(
    cluster_file, backend, strategy, given, message
):
    with pytest.raises(GpkError, match=message) as error:
        small_mlp_experiment(backend=backend).plan(strategy, 1, cluster=cluster_file, **given)
    assert "\n" not in str(error.value)


def test_a_comparison_gives_the_cluster_to_multiworker_rows_only(cluster_file):
    exp = small_mlp_experiment(backend="jax", batch_size=48)
    given = {"cluster": cluster_file, "backend": "jax"}
    specs = plan_grid(exp.plan, ["fsdp", "multiworker"], [1, 2], given)
    on_cluster = {(s.strategy, s.devices.count): s.cluster is not None for s in specs}
    assert on_cluster == {("fsdp", 2): False, ("multiworker", 1): True}
