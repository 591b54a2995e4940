"""A card made of a model's own layers: its rows, blocks and stage cuts, its plans' memory and
step through the one planner (`parallel_plan_ranking.rank`), the tensor plans the sharding
rules allow, and ResNet-50 on one node of eight A100s against NVIDIA's published throughput.
The counts are real ones (`tests/analysis/data`, as `test_roofline.py` reads them)."""

from __future__ import annotations

import json
import pathlib

import pytest

from gpu_parallel_kit.analysis.cost_model import layer_rows as lr
from gpu_parallel_kit.analysis.cost_model.counted_work import from_counts
from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster
from gpu_parallel_kit.analysis.cost_model.model_card import ModelCard, rows_card
from gpu_parallel_kit.analysis.cost_model.parallel_plan_ranking import rank
from gpu_parallel_kit.analysis.cost_model.roofline import DEFAULT_EFFICIENCY
from gpu_parallel_kit.analysis.cost_model.stage_split import stage_split
from gpu_parallel_kit.errors import GpkError
from gpu_parallel_kit.sharding.layout import LayerInfo, VariableInfo

DATA = pathlib.Path(__file__).parent.parent / "data"
# NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5, DGX A100 (8x A100 80GB), mixed
# precision, 8 GPUs: 16,621 img/s (docs/planning.md names the table)
PUBLISHED_8_A100 = 16_621
# the same table, DGX-1 (8x V100 16GB), mixed precision, 8 GPUs
PUBLISHED_8_V100 = 8_322
# NVIDIA's V100 datasheet (SXM2): 125 TFLOP/s of fp16 tensor math, 900 GB/s, 16 GB; NVLink 2
V100 = {"name": "v100", "tflops": 125, "memory_gb": 16, "memory_bandwidth_gb_s": 900}
NVLINK2 = {"name": "nvlink2", "bandwidth_gb_s": 130, "latency_us": 5}


def work_of(name: str):
    return from_counts(json.loads((DATA / f"{name}_jax_count.json").read_text()))


def card(name: str, precision: str = "bf16", width: float = 1.0, infos=()) -> ModelCard:
    work = work_of(name)
    return rows_card(work, lr.layer_rows(work, activation_width=width, infos=infos), precision)


def ranked(card: ModelCard, cluster: GPUCluster, batch: int) -> list[dict]:
    return rank(card, cluster, batch, efficiency=DEFAULT_EFFICIENCY)


@pytest.fixture(scope="module")
def node():
    return GPUCluster("a100", nodes=1, per_node=8)


def test_the_rows_sum_to_the_counted_step_and_name_every_layer():
    resnet = card("resnet50")
    assert len(resnet.rows) == 160 and resnet.rows[1].kind == "Conv2D"
    assert resnet.layers == 160 and not resnet.has_attention
    assert sum(r.flops for r in resnet.rows) == pytest.approx(work_of("resnet50").flops_per_sample)
    assert sum(r.parameters for r in resnet.rows) == pytest.approx(resnet.parameters, rel=0.01)
    shown = {"name", "kind", "flops", "bytes", "parameters", "kept_bytes"}
    assert shown <= set(resnet.layer_table()[0])


def test_repeated_layers_are_found_as_blocks():
    kinds = ("Input", "Conv", "BN", "ReLU", "Conv", "BN", "ReLU", "Conv", "BN", "ReLU", "Dense")
    assert lr.find_blocks(kinds) == (lr.LayerBlock(1, ("Conv", "BN", "ReLU"), 3),)
    assert lr.find_blocks(("a", "b", "c")) == ()
    assert lr.find_blocks(tuple(row.kind for row in card("resnet50").rows))  # bottlenecks


def test_stages_are_contiguous_cuts_balanced_on_flops():
    resnet = card("resnet50")
    for stages in (2, 4):
        sizes = stage_split(resnet, stages).blocks
        assert len(sizes) == stages and sum(sizes) == len(resnet.rows)
        flops, start = [], 0
        for size in sizes:
            flops.append(sum(r.flops for r in resnet.rows[start : start + size]))
            start += size
        # the costliest stage within a bottleneck block's share of the even split
        assert max(flops) < 1.15 * sum(flops) / stages


def test_sharding_the_states_over_the_data_axis_shrinks_them(node):
    resnet = card("resnet50")
    rows = {r["sharding"]: r for r in ranked(resnet, node, 2048)
            if r["stages"] == 1 and r["micro_batch_size"] == 32}  # fmt: skip
    states = {k: r["params_bytes"] + r["grads_bytes"] + r["optimizer_bytes"]
              for k, r in rows.items()}  # fmt: skip
    assert states["fsdp"] < states["zero-2"] < states["zero-1"] < states["none"]
    assert rows["fsdp"]["comm:data_s"] > rows["none"]["comm:data_s"]


def test_resnet50_on_eight_a100s_is_within_15_percent_of_the_published_figure(node):
    found = ranked(card("resnet50"), node, 2048)
    best = found[0]
    assert best["fits"] and best["data"] == 8 and best["stages"] == 1
    assert 0.85 < best["throughput_samples_s"] / PUBLISHED_8_A100 < 1.15
    piped = [r for r in found if r["stages"] > 1]
    assert piped and all(r["bubble_s"] > 0 for r in piped)


def test_resnet50_on_eight_v100s_is_within_15_percent_of_the_published_figure():
    fp16 = card("resnet50", "fp16", width=0.5)
    dgx1 = GPUCluster(V100, nodes=1, per_node=8, inside=NVLINK2)
    best = ranked(fp16, dgx1, 2048)[0]
    assert best["fits"] and best["data"] == 8
    assert 0.85 < best["throughput_samples_s"] / PUBLISHED_8_V100 < 1.15


def test_a_small_mlp_waits_on_its_kernel_launches(node):
    best = ranked(card("mlp"), node, 4096)[0]
    assert best["bound"] == "launches"


def test_a_batch_no_plan_divides_is_refused_in_one_sentence(node):
    with pytest.raises(GpkError, match="multiple of 8"):
        ranked(card("mlp"), node, 7)


def test_a_traced_counts_residuals_replace_the_estimate_where_they_name_the_layers():
    work = work_of("resnet50")
    estimated = lr.layer_rows(work, activation_width=0.5)
    traced = lr.layer_rows(work, {"conv1_bn": 6.4e6, "(model)": 64.0})
    named = {row.name: row.kept_bytes for row in traced}
    assert named["conv1_bn"] == 6.4e6 and named["conv1_conv"] == 0.0  # kept under the next
    assert sum(row.kept_bytes for row in traced) == 6.4e6
    assert lr.layer_rows(work, {"dense_9": 1.0}) == lr.layer_rows(work)  # no name matches
    assert estimated[1].kept_bytes == pytest.approx(lr.layer_rows(work)[1].kept_bytes / 2)


def dense(name: str, inputs: int, outputs: int) -> LayerInfo:
    kernel = VariableInfo(f"{name}/kernel", (inputs, outputs), "kernel")
    return LayerInfo(name, "dense", (kernel,), in_elements=inputs, out_elements=outputs)


def test_a_card_of_rows_gets_tensor_plans_where_the_rules_split_its_layers(node):
    """The lab's MLP count with its layers as the sharding rules read them: a dense pair
    splits column then row, so tensor plans are listed, each device holding less, and an
    all-reduce of the pair's activations is timed; without the layers read, none."""
    names = [row.name for row in card("mlp").rows]
    widths = [row.parameters for row in card("mlp").rows]
    assert len(names) == 4 and all(widths)
    infos = (dense(names[0], 32, 256), dense(names[1], 256, 256), dense(names[2], 256, 128))
    split = card("mlp", infos=infos)
    assert split.tensor_splits(2) and not card("mlp").tensor_splits(2)
    found = ranked(split, node, 4096)
    tensor = [r for r in found if r["tensor"] > 1]
    assert tensor and {r["sharding"] for r in tensor if r["stages"] == 1} >= {"fsdp", "none"}
    assert all(r["comm:tensor_s"] > 0 for r in tensor if r["stages"] == 1)
    alone = next(r for r in found if (r["tensor"], r["stages"], r["sharding"]) == (1, 1, "none")
                 and r["micro_batch_size"] == 512)  # fmt: skip
    paired = next(r for r in found if (r["tensor"], r["stages"], r["sharding"]) == (2, 1, "none")
                  and r["micro_batch_size"] == 1024)  # fmt: skip
    assert paired["params_bytes"] < alone["params_bytes"]
    assert all(r["tensor"] == 1 for r in ranked(card("mlp"), node, 4096))
