"""A pipeline on (data, model) sub-meshes projected with each axis on the link it crosses."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster, project_onto_cluster
from gpu_parallel_kit.analysis.cost_model.projected_rows import ProjectionOptions, project_results
from gpu_parallel_kit.errors import GpkError
from tests.builders import measured_row

PARAMS = 4_000_000


def mesh_row():
    """2 stages × (data 2, model 2) on 8 devices, 1f1b over 4 micro-batches: each device holds
    half its stage's weights; stage s on devices 0, 1, 4, 5 and 2, 3, 6, 7."""
    names = [f"/cpu:{i}" for i in range(8)]
    groups = [[names[t + 2 * (s + 2 * d)] for d in range(2) for t in range(2)] for s in range(2)]
    stages = [
        {
            "stage": s,
            "devices": group,
            "parameter_bytes": PARAMS // 2,
            "busy_s": 0.1,
            "tensor_all_reduce_bytes": 8_000_000,
            "tensor_collectives": 4,
            "data_all_reduce_bytes": 400_000,
        }
        for s, group in enumerate(groups)
    ]
    memory = {name: {"params_bytes": PARAMS // 4} for name in names}
    extra = {
        "parameter_bytes": PARAMS,
        "mesh_axes": "pipeline 2 × tensor 2 × data 2",
        "cut_bytes": [256 * 2048 * 2],
        "stages": stages,
        "memory": {"devices": memory},
    }
    return measured_row(
        "p3", "pipeline", 8, 0.2, mesh="2x2", schedule="1f1b", micro_batches=4, extra=extra
    )


def runs():
    return [measured_row("s", "single", 1, 0.3, extra={"parameter_bytes": PARAMS}), mesh_row()]


def mesh_rows(rows):
    return [r for r in rows if r.extra.get("mesh_axes")]


def fast_inside(per_node: int) -> GPUCluster:
    return GPUCluster("h100", nodes=8 // per_node, per_node=per_node, between="net100g")


def test_each_axis_is_charged_on_the_link_the_cluster_places_it_on():
    (row,) = mesh_rows(
        project_onto_cluster(runs(), fast_inside(4), [1, 8], ProjectionOptions(compute_scale=1))
    )
    assert row.run_id.endswith(":pipeline-1f1b-m4-2x2x2") and row.mesh == "2x2"
    # Tensor pairs and the two stages' neighbours share a node; the replicas are a node apart.
    assert row.extra["links"] == {"tensor": "nvlink4", "stages": "nvlink4", "data": "net100g"}
    assert min(row.extra[k] for k in ("tensor_comm_s", "data_comm_s", "send_comm_s")) > 0


def test_tensor_inside_a_node_costs_less_than_tensor_across_nodes():
    inside = mesh_rows(
        project_onto_cluster(runs(), fast_inside(4), [8], ProjectionOptions(compute_scale=1))
    )[0]
    across = mesh_rows(
        project_onto_cluster(runs(), fast_inside(1), [8], ProjectionOptions(compute_scale=1))
    )[0]
    assert across.extra["links"] == {"tensor": "net100g", "stages": "net100g", "data": "net100g"}
    assert inside.extra["tensor_comm_s"] < across.extra["tensor_comm_s"] / 2
    # The data ring crosses the network on both clusters: it costs the same.
    assert inside.extra["data_comm_s"] == pytest.approx(across.extra["data_comm_s"])
    assert inside.step_time_s < across.step_time_s


def test_one_link_carries_every_axis_and_the_row_keeps_its_shape():
    rows = project_results(runs(), "pcie4", [1, 2, 8], ProjectionOptions(compute_scale=1))
    (row,) = mesh_rows(rows)
    assert set(row.extra["links"].values()) == {"pcie4"}
    assert row.devices == 8 and row.extra["bubble_fraction"] > 0
    # The measured 3-D run does not stand in for a plain 8-stage pipeline's split.
    plain = [r for r in rows if r.strategy == "pipeline" and not r.extra.get("mesh_axes")]
    assert sorted(r.devices for r in plain) == [1, 2, 8]
    # Asked at a count it did not run at, the 3-D run is not projected.
    assert not mesh_rows(
        project_results(runs(), "pcie4", [1, 4], ProjectionOptions(compute_scale=1))
    )


def test_a_run_on_fewer_gpus_is_placed_on_the_clusters_first_nodes():
    cluster = GPUCluster("h100", nodes=4, per_node=4, between="net100g")
    (row,) = mesh_rows(
        project_onto_cluster(runs(), cluster, [8], ProjectionOptions(compute_scale=1))
    )
    assert row.extra["links"]["data"] == "net100g" and row.extra["links"]["tensor"] == "nvlink4"
    with pytest.raises(GpkError, match="devices=6 fills no whole node of 4 GPUs"):
        cluster.first(6)
