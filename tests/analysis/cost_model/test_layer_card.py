"""A card made of a model's own layers: its rows, blocks and stage cuts, its plans' memory and
step, and ResNet-50 on one node of eight A100s against NVIDIA's published throughput. The counts
are real ones (`tests/analysis/data`, as `test_roofline.py` reads them)."""

from __future__ import annotations

import json
import pathlib

import pytest

from gpu_parallel_kit.analysis.cost_model import layer_card as lc
from gpu_parallel_kit.analysis.cost_model.counted_work import from_counts
from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster
from gpu_parallel_kit.errors import GpkError

DATA = pathlib.Path(__file__).parent.parent / "data"
# NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5, DGX A100 (8x A100 80GB), mixed
# precision, 8 GPUs: 16,621 img/s (docs/planning.md names the table)
PUBLISHED_8_A100 = 16_621
# the same table, DGX-1 (8x V100 16GB), mixed precision, 8 GPUs
PUBLISHED_8_V100 = 8_322
# NVIDIA's V100 datasheet (SXM2): 125 TFLOP/s of fp16 tensor math, 900 GB/s, 16 GB; NVLink 2
V100 = {"name": "v100", "tflops": 125, "memory_gb": 16, "memory_bandwidth_gb_s": 900}
NVLINK2 = {"name": "nvlink2", "bandwidth_gb_s": 130, "latency_us": 5}


def card(name: str) -> lc.LayerCard:
    work = from_counts(json.loads((DATA / f"{name}_jax_count.json").read_text()))
    return lc.LayerCard(name, lc.layer_rows(work), work)


@pytest.fixture(scope="module")
def node():
    return GPUCluster("a100", nodes=1, per_node=8)


def test_the_rows_sum_to_the_counted_step_and_name_every_layer():
    resnet = card("resnet50")
    assert len(resnet.rows) == 160 and resnet.rows[1].kind == "Conv2D"
    assert sum(r.flops for r in resnet.rows) == pytest.approx(resnet.work.flops_per_sample)
    assert sum(r.parameters for r in resnet.rows) == pytest.approx(resnet.parameters, rel=0.01)
    assert {"name", "kind", "flops", "bytes", "parameters", "kept_bytes"} <= set(resnet.table()[0])


def test_repeated_layers_are_found_as_blocks():
    kinds = ("Input", "Conv", "BN", "ReLU", "Conv", "BN", "ReLU", "Conv", "BN", "ReLU", "Dense")
    assert lc.find_blocks(kinds) == (lc.LayerBlock(1, ("Conv", "BN", "ReLU"), 3),)
    assert lc.find_blocks(("a", "b", "c")) == ()
    assert card("resnet50").blocks()  # its bottlenecks repeat


def test_stages_are_contiguous_cuts_balanced_on_flops():
    resnet = card("resnet50")
    for stages in (2, 4):
        sizes = resnet.stage_sizes(stages)
        assert len(sizes) == stages and sum(sizes) == len(resnet.rows)
        flops, start = [], 0
        for size in sizes:
            flops.append(sum(r.flops for r in resnet.rows[start : start + size]))
            start += size
        # the costliest stage within a bottleneck block's share of the even split
        assert max(flops) < 1.15 * sum(flops) / stages


def test_sharding_the_states_over_the_data_axis_shrinks_them(node):
    resnet = card("resnet50")
    rows = {r["sharding"]: r for r in lc.rank_layers(resnet, node, 2048)
            if r["stages"] == 1 and r["micro_batch_size"] == 32}  # fmt: skip
    states = {k: r["params_bytes"] + r["grads_bytes"] + r["optimizer_bytes"]
              for k, r in rows.items()}  # fmt: skip
    assert states["fsdp"] < states["zero-2"] < states["zero-1"] < states["none"]
    assert rows["fsdp"]["comm:data_s"] > rows["none"]["comm:data_s"]


def test_resnet50_on_eight_a100s_is_within_15_percent_of_the_published_figure(node):
    ranked = lc.rank_layers(card("resnet50"), node, 2048)
    best = ranked[0]
    assert best["fits"] and best["data"] == 8 and best["stages"] == 1
    assert 0.85 < best["throughput_samples_s"] / PUBLISHED_8_A100 < 1.15
    piped = [r for r in ranked if r["stages"] > 1]
    assert piped and all(r["bubble_s"] > 0 for r in piped)


def test_resnet50_on_eight_v100s_is_within_15_percent_of_the_published_figure():
    work = card("resnet50").work
    fp16 = lc.LayerCard("resnet50", lc.layer_rows(work, activation_width=0.5), work, "fp16")
    dgx1 = GPUCluster(V100, nodes=1, per_node=8, inside=NVLINK2)
    best = lc.rank_layers(fp16, dgx1, 2048)[0]
    assert best["fits"] and best["data"] == 8
    assert 0.85 < best["throughput_samples_s"] / PUBLISHED_8_V100 < 1.15


def test_a_small_mlp_waits_on_its_kernel_launches(node):
    best = lc.rank_layers(card("mlp"), node, 4096)[0]
    assert best["bound"] == "launches"


def test_a_batch_no_plan_divides_is_refused_in_one_sentence(node):
    with pytest.raises(GpkError, match="multiple of 8"):
        lc.rank_layers(card("mlp"), node, 7)


def test_a_traced_counts_residuals_replace_the_estimate_where_they_name_the_layers():
    work = card("resnet50").work
    estimated = lc.layer_rows(work, activation_width=0.5)
    traced = lc.layer_rows(work, {"conv1_bn": 6.4e6, "(model)": 64.0})
    named = {row.name: row.kept_bytes for row in traced}
    assert named["conv1_bn"] == 6.4e6 and named["conv1_conv"] == 0.0  # kept under the next
    assert sum(row.kept_bytes for row in traced) == 6.4e6
    assert lc.layer_rows(work, {"dense_9": 1.0}) == lc.layer_rows(work)  # no name matches
    assert estimated[1].kept_bytes == pytest.approx(lc.layer_rows(work)[1].kept_bytes / 2)
