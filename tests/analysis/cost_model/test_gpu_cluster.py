"""A two-level cluster places each axis of a plan on the link its groups cross."""

from __future__ import annotations

import pytest

from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster
from gpu_parallel_kit.analysis.cost_model.hardware_presets import INTERCONNECTS
from gpu_parallel_kit.analysis.cost_model.software_stack import STACKS, newest_stack
from gpu_parallel_kit.errors import GpkError
from tests.builders import measured_row

NVLINK3, NET400G = INTERCONNECTS["nvlink3"], INTERCONNECTS["net400g"]


@pytest.fixture
def a100s():
    return GPUCluster(device="a100", nodes=16, per_node=8, inside="nvlink3", between="net400g")


def test_a_cluster_takes_presets_and_its_gpus_usual_link(a100s):
    assert (a100s.device.name, a100s.gpus, a100s.inside, a100s.between) == (
        "a100", 128, NVLINK3, NET400G,
    )  # fmt: skip
    assert GPUCluster("h100", nodes=2).inside is INTERCONNECTS["nvlink4"]
    assert GPUCluster("a100", nodes=2).inside is NVLINK3
    assert GPUCluster("h100", between="net200g").between.bandwidth_bytes_s == 22e9
    # the software its steps are timed under last: the newest stack the kit holds, by default
    assert a100s.label == f"16x8 a100, nvlink3 inside, net400g between, under {newest_stack().name}"
    assert GPUCluster("a100", stack="megatron-lm-2022").stack is STACKS["megatron-lm-2022"]


def test_a_stack_the_kit_does_not_hold_or_fp8_without_its_fit_is_one_sentence():
    with pytest.raises(GpkError, match=r"stack='megatron-3000' is not one the kit holds; use"):
        GPUCluster("h100", stack="megatron-3000")
    with pytest.raises(GpkError, match=r"'megatron-lm-2022' has no fp8 runs .* precision='bf16'"):
        STACKS["megatron-lm-2022"].matmul_at("fp8")


def test_tensor_inside_a_node_and_data_between_nodes(a100s):
    assert a100s.links(data=16, tensor=8, stages=1) == {
        "tensor": NVLINK3, "stages": None, "data": NET400G,
    }  # fmt: skip


def test_a_pipeline_across_nodes_sends_on_the_network(a100s):
    assert a100s.links(data=4, tensor=2, stages=16) == {
        "tensor": NVLINK3, "stages": NET400G, "data": NET400G,
    }  # fmt: skip
    # Eight stages fill one node: their sends stay inside, the replicas are a node apart.
    assert a100s.links(data=16, tensor=1, stages=8) == {
        "tensor": None, "stages": NVLINK3, "data": NET400G,
    }  # fmt: skip


def test_groups_wider_than_a_node_cross_the_network(a100s):
    assert a100s.links(data=1, tensor=16, stages=8)["tensor"] is NET400G
    one_node = GPUCluster("h100", nodes=1, per_node=8)
    assert one_node.links(data=8, tensor=1, stages=1)["data"] is INTERCONNECTS["nvlink4"]
    # Two replicas of a 4-GPU tensor group share a node: the data ring stays inside too.
    assert one_node.links(data=2, tensor=4, stages=1)["data"] is INTERCONNECTS["nvlink4"]


def test_a_group_with_several_gpus_on_each_node_spreads_over_their_links(a100s):
    """A data group's gradients: NCCL runs a ring through each GPU of a node in the group,
    each leaving by that GPU's own link, so 2 GPUs a node double the network's width. A tensor
    group's per-layer collectives keep one GPU's link."""
    two = a100s.links(data=32, tensor=4, stages=1)["data"]  # 2 replicas' GPUs on each node
    assert two.bandwidth_bytes_s == 2 * NET400G.bandwidth_bytes_s
    assert two.latency_s == NET400G.latency_s
    fsdp = a100s.links(data=128, tensor=1, stages=1)["data"]
    assert fsdp.bandwidth_bytes_s == min(8 * NET400G.bandwidth_bytes_s, NVLINK3.bandwidth_bytes_s)
    # One GPU of each node in the group: its own link alone, as before.
    assert a100s.links(data=16, tensor=8, stages=1)["data"] is NET400G
    assert a100s.links(data=4, tensor=32, stages=1)["tensor"] is NET400G


def test_a_collective_over_some_gpus_uses_the_link_they_need(a100s):
    assert a100s.link_for(8) is NVLINK3 and a100s.link_for(9) is NET400G
    with pytest.raises(GpkError, match="devices=200 is more than the cluster's 128 GPUs"):
        a100s.link_for(200)


def test_bad_plans_and_clusters_are_one_sentence(a100s):
    with pytest.raises(GpkError, match=r"data=4 × tensor=8 × stages=2 is 64 GPUs, not the"):
        a100s.links(data=4, tensor=8, stages=2)
    with pytest.raises(GpkError, match="nodes"):
        GPUCluster("a100", nodes=0)
    own = {"name": "mine", "tflops": 100, "memory_gb": 40, "memory_bandwidth_gb_s": 1000}
    with pytest.raises(GpkError, match="has no usual link inside a node; give inside="):
        GPUCluster(own, nodes=2)
    assert GPUCluster(own, nodes=2, inside="pcie4").inside is INTERCONNECTS["pcie4"]


def measured_runs():
    extra = {"parameter_bytes": 4_000_000}
    return [
        measured_row("s", "single", 1, 0.3, extra=extra),
        measured_row("d", "data", 2, 0.2, extra=extra),
    ]


def test_a_projection_onto_a_cluster_uses_the_link_each_count_needs():
    from gpu_parallel_kit.analysis.cost_model.gpu_cluster import project_onto_cluster
    from gpu_parallel_kit.analysis.cost_model.projected_rows import ProjectionOptions

    cluster = GPUCluster("h100", nodes=4, per_node=8, between="net100g")
    rows = project_onto_cluster(
        measured_runs(), cluster, [1, 8, 16], ProjectionOptions(compute_scale=1)
    )
    by_id = {r.run_id.split(":")[-1]: r for r in rows}
    assert list(by_id) == ["single-1", "data-1", "data-8", "data-16"]
    assert {r.experiment_id for r in rows} == {"e1:nvlink4/net100g+h100"}
    assert by_id["data-8"].extra["preset"] == "nvlink4"
    assert by_id["data-16"].extra["preset"] == "net100g"
    # The network is 36x slower than NVLink 4: the 16-GPU ring costs more than the 8-GPU one.
    assert by_id["data-16"].comm_time_s > 10 * by_id["data-8"].comm_time_s
    with pytest.raises(GpkError, match="devices=64 is more than the cluster's 32 GPUs"):
        project_onto_cluster(measured_runs(), cluster, [64], ProjectionOptions(compute_scale=1))


def test_comparison_project_takes_a_cluster_in_place_of_a_link():
    import gpu_parallel_kit as gpk

    cmp = gpk.Comparison(measured_runs())
    cluster = gpk.GPUCluster("h100", nodes=2, per_node=8)
    table = cmp.project(cluster, [1, 8, 16], compute_scale=1).table
    projected = table[table["projected"]]
    assert sorted(projected["devices"]) == [1, 1, 8, 16]  # single-1 and data-1
    by_link = projected.set_index("devices")["reason"]
    assert "nvlink4" in by_link[8] and "net400g" in by_link[16]
    # A link name, as before, projects every count on that one link.
    plain = cmp.project("nvlink4", [16], compute_scale=1).table
    assert "net400g" not in " ".join(plain["reason"].dropna())


def test_a_cluster_with_one_link_inside_and_between_projects_every_count():
    from gpu_parallel_kit.analysis.cost_model.gpu_cluster import project_onto_cluster
    from gpu_parallel_kit.analysis.cost_model.projected_rows import ProjectionOptions

    flat = GPUCluster("h100", nodes=2, per_node=4, inside="nvlink4", between="nvlink4")
    rows = project_onto_cluster(
        measured_runs(), flat, [1, 4, 8], ProjectionOptions(compute_scale=1)
    )
    assert sorted(r.devices for r in rows if r.strategy == "data") == [1, 4, 8]
