"""Published large-model training runs, and the plan search's projection of each run's plan.

Each `PublishedRun` holds a run as its paper reports it: the model, the GPUs and their network,
the plan, and the throughput in the paper's own counting (with the recomputed forward, 96·…,
or without, 72·…). `project` sizes and times that same plan with the cost model
(`analysis/cost_model/parallel_plan_memory.py` and `parallel_plan_step_time.py`) on a matching
`GPUCluster`, converts the kit's step into the paper's units, and ranks every plan of the model
to compare the kit's best with the one used. The models' cards are counted by depth
(`worker/jax/depth_scaling.py`) and stored in `published_cards.json`, which
`benchmarks/published_runs.py` writes; the Llama 2 7B of NeMo's long-sequence table
(`long_sequence_runs`) is counted at each of its sequences and stored in
`published_long_cards.json`. Sources and checks: `docs/published-runs.md`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ..analysis.cost_model.gpu_cluster import GPUCluster
from ..analysis.cost_model.model_card import AS_WRITTEN, FLASH, SELECTIVE, ModelCard
from ..analysis.cost_model.parallel_plan import NO_PIPELINE, Plan
from ..analysis.cost_model.parallel_plan_memory import memory
from ..analysis.cost_model.parallel_plan_ranking import rank
from ..analysis.cost_model.parallel_plan_step_time import step_time
from ..analysis.cost_model.plan_figures import PART_COLUMNS
from ..errors import GpkError

CARDS = Path(__file__).with_name("published_cards.json")
LONG_CARDS = Path(__file__).with_name("published_long_cards.json")
# How a run's published FLOPs are counted (`published_flops`).
NARAYANAN_FLOPS = "narayanan"  # a GPT's (96 or 72)·B·s·L·h²·(1 + s/6h + V/16Lh)
LLAMA_FLOPS = "nemo-llama2"  # NeMo's and Megatron-LM's, a gated MLP and full s² attention
PUBLISHED_FLOPS = "published"  # the source's own: its TFLOP/s per GPU over its step
BRIDGE = "Megatron-Bridge"  # how the archive's rows name their stack: "Megatron-Bridge, 26.04 ..."
MAXTEXT = "MaxText"  # dgxc's MaxText rows: "MaxText on JAX, container nvcr.io/nvidia/jax:..."
KERAS_NORM_COPIES = 12  # bytes a token and unit of width Keras's layer norms keep beyond Megatron's
PLAN_FIELDS = tuple(field.name for field in fields(Plan))
PARTS = PART_COLUMNS
SELENE = "DGX A100 80 GB nodes: NVLink 3 and NVSwitch inside, 8 × 200 Gb/s HDR InfiniBand"
NARAYANAN = "Narayanan et al., SC 2021 (arXiv 2104.04473), Table 1"
KORTHIKANTI = "Korthikanti et al., MLSys 2023 (arXiv 2205.05198), Tables 3 and 5"
SMITH = "Smith et al., 2022 (arXiv 2201.11990), MT-NLG, throughput table"
BLOOM = "BigScience, 2022 (arXiv 2211.05100), section 3.4; BLOOM model card"
# Jean Zay's A100 nodes: four 100 Gb/s Omni-Path links per node of 8, so 50 Gb/s a GPU (~90 %)
OMNIPATH = {"name": "opa-4x100g", "bandwidth_gb_s": 5.6, "latency_us": 5.0,
            "source": "Jean Zay: 4 × 100 Gb/s Omni-Path per 8-GPU node, ~90 %"}  # fmt: skip


@dataclass(frozen=True)
class PublishedRun:
    """One published training run: model, GPUs, plan and reported throughput.

    Args:
        name: how tables name the run.
        source: the paper and its table.
        layers, hidden, heads, sequence, vocabulary: the GPT's config.
        parameters: the published parameter count.
        gpus, per_node, between, network: the GPUs (A100 80 GB), GPUs per node, the kit's link
            between nodes (a preset or a dict) and the network as the paper names it.
        data, tensor, stages, micro_batch_size, global_batch: the plan.
        schedule: the kit's schedule of the run's pipeline ("-" without one).
        virtual_stages: the interleaved schedule's chunks per device (1 otherwise).
        recompute: "full", "selective" or "none".
        sharding: "none", or "zero-1" where the optimizer state was sharded.
        tflops_per_gpu: the reported TFLOP/s per GPU, or None when a time is reported.
        iteration_s: the reported seconds per iteration, or None.
        recomputed_counted: whether the paper's FLOPs count the recomputed forward (96·…).
        unchecked: the figures not checked against the paper's text here.
        stack: the software stack it ran under, a name of `software_stack.STACKS`.
        device: the GPU, a preset name ("a100", "h100").
        precision: "bf16" or "fp8" (its matmuls on FP8 tensor cores).
        attention: "as-written", or "flash" where the software ran a fused kernel.
        split_sequence: whether it ran sequence parallelism; None: where it recomputed
            selectively (Korthikanti et al. ran the two together).
        context: the context axis: each sample's tokens split over a ring of this many GPUs.
        intermediate: the MLP's width (0: a GPT's 4·h).
        kv_heads: the key-value heads (0: as many as `heads`).
        gated: whether the MLP is gated (SwiGLU, a Llama's): its card is a counted Llama
            (`published_long_cards.json`), not a GPT.
        flops_counted: how the published FLOPs are counted (`published_flops`):
            `NARAYANAN_FLOPS`, `LLAMA_FLOPS`, or `PUBLISHED_FLOPS` where the source gives its
            TFLOP/s beside its step.
        card_from: the key of its model's card in `published_h100_cards.json`, where it is
            counted there ("": by its config, as above).
        expert: the expert axis: data replicas sharing a block's experts (`Plan.expert`).
        balanced_experts: whether the run forced every expert an even share of the tokens
            (Megatron-Core's `moe_router_force_load_balancing`): the busiest expert holds no
            more than its share, a capacity factor of 1.
        stage_blocks: the blocks each stage holds, where the run split them its own way
            (`Plan.stage_blocks`; (): the kit's split).
    """

    name: str
    source: str
    layers: int
    hidden: int
    heads: int
    sequence: int
    vocabulary: int
    parameters: float
    gpus: int
    per_node: int
    between: str | dict
    network: str
    data: int
    tensor: int
    stages: int
    micro_batch_size: int
    global_batch: int
    schedule: str
    virtual_stages: int
    recompute: str
    sharding: str
    tflops_per_gpu: float | None
    iteration_s: float | None
    recomputed_counted: bool
    unchecked: str = ""
    stack: str = ""  # the software it ran under (`software_stack.STACKS`)
    device: str = "a100"
    precision: str = "bf16"
    attention: str = AS_WRITTEN
    split_sequence: bool | None = None  # sequence parallelism; None: with selective alone
    context: int = 1
    intermediate: int = 0
    kv_heads: int = 0
    gated: bool = False
    flops_counted: str = NARAYANAN_FLOPS
    card_from: str = ""  # a card of `published_h100_cards.json`, by its key
    expert: int = 1  # the expert axis, inside the data axis
    balanced_experts: bool = False  # every expert forced an even share: capacity factor 1
    stage_blocks: tuple[int, ...] = ()  # blocks per stage; (): the kit's split

    @property
    def sequence_parallel(self) -> bool:
        """Whether the run split its layer norms and dropouts by tensor: as it says, else with
        selective recomputation (Korthikanti et al. ran the two together, always)."""
        if self.split_sequence is not None:
            return self.split_sequence
        return self.recompute == SELECTIVE

    @property
    def card_key(self) -> str:
        """The stored card's key: "L24-h2304-a24-s2048-V51200", and for a gated MLP
        "llama-L32-h4096-a32-kv32-f11008-s32768-V32000"."""
        if self.gated:
            return llama_key(
                self.layers, self.hidden, self.heads, self.kv_heads or self.heads,
                self.intermediate, self.sequence, self.vocabulary,
            )  # fmt: skip
        return f"L{self.layers}-h{self.hidden}-a{self.heads}-s{self.sequence}-V{self.vocabulary}"


def llama_key(
    layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int, sequence: int,
    vocabulary: int,
) -> str:  # fmt: skip
    """A stored Llama card's key: "llama-L32-h4096-a32-kv32-f11008-s32768-V32000"."""
    return (
        f"llama-L{layers}-h{hidden}-a{heads}-kv{kv_heads}-f{intermediate}-s{sequence}-V{vocabulary}"
    )


def _narayanan(size, heads, hidden, layers, tensor, stages, gpus, batch, tflops):
    return PublishedRun(
        f"Megatron-LM {size} B", NARAYANAN, layers, hidden, heads, 2048, 51200, size * 1e9,
        gpus, 8, "net200g", SELENE, gpus // (tensor * stages), tensor, stages, 1, batch,
        "1f1b" if stages > 1 else NO_PIPELINE, 1, "full", "none", tflops, None, True,
        "micro-batch size (1 assumed) and schedule (1F1B assumed): not in Table 1",
        "megatron-lm-2021",
    )  # fmt: skip


def _korthikanti(size, heads, hidden, layers, stages, gpus, batch, micro, seconds, recompute):
    # Their times are read in MFU's counting (72·…), whatever the recomputation.
    method = "full recomputation" if recompute == "full" else "selective + sequence parallel"
    return PublishedRun(
        f"Korthikanti {size} B, {method}", KORTHIKANTI, layers, hidden, heads, 2048, 51200,
        size * 1e9, gpus, 8, "net200g", SELENE, gpus // (8 * stages), 8, stages, micro, batch,
        "1f1b" if stages > 1 else NO_PIPELINE, 1, recompute, "none", None, seconds,
        False, "schedule (1F1B assumed): not checked", "megatron-lm-2022",
    )  # fmt: skip


def _smith(nodes, seconds):
    gpus = 8 * nodes
    return PublishedRun(
        f"MT-NLG 530 B, {gpus} GPUs", SMITH, 105, 20480, 128, 2048, 51200, 530e9, gpus, 8,
        "net200g", SELENE, gpus // 280, 8, 35, 1, 1920, "1f1b", 1, "full", "none", None,
        seconds, True, "micro-batch size (1 assumed) and schedule (1F1B assumed): not checked",
        "deepspeed-megatron-2021",
    )  # fmt: skip


RUNS: tuple[PublishedRun, ...] = (
    _narayanan(1.7, 24, 2304, 24, 1, 1, 32, 512, 137),
    _narayanan(3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    _narayanan(7.5, 32, 4096, 36, 4, 1, 128, 512, 142),
    _narayanan(18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    _narayanan(39.1, 64, 8192, 48, 8, 2, 512, 1536, 138),
    _narayanan(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    _narayanan(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148),
    _narayanan(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    _narayanan(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    _narayanan(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
    _korthikanti(22, 64, 6144, 48, 1, 8, 4, 4, 1.42, "full"),
    _korthikanti(22, 64, 6144, 48, 1, 8, 4, 4, 1.10, "selective"),
    _korthikanti(175, 96, 12288, 96, 8, 64, 64, 1, 18.13, "full"),
    _korthikanti(175, 96, 12288, 96, 8, 64, 64, 1, 13.75, "selective"),
    _korthikanti(530, 128, 20480, 105, 35, 280, 280, 1, 49.05, "full"),
    _korthikanti(530, 128, 20480, 105, 35, 280, 280, 1, 37.83, "selective"),
    _korthikanti(1000, 160, 25600, 128, 64, 512, 512, 1, 94.42, "full"),
    _korthikanti(1000, 160, 25600, 128, 64, 512, 512, 1, 71.49, "selective"),
    _smith(280, 60.1),
    _smith(350, 50.2),
    _smith(420, 44.4),
    PublishedRun(
        "BLOOM 176 B",
        BLOOM,
        70,
        14336,
        112,
        2048,
        250880,
        176.247e9,
        384,
        8,
        OMNIPATH,
        "Jean Zay: A100 80 GB, NVLink inside, 4 × 100 Gb/s Omni-Path per node",
        8,
        4,
        12,
        2,
        2048,
        "1f1b",
        1,
        "full",
        "zero-1",
        150,
        None,
        True,
        "micro-batch size 2, global batch 2,048, full recomputation, the 96·… counting and "
        "the schedule: from BigScience's training notes, not checked here",
        "megatron-deepspeed-bloom",
    ),  # fmt: skip
)


H100_RUNS_FILE = Path(__file__).with_name("published_h100_runs.json")
DGX_H100 = "DGX H100 nodes: NVLink 4 and NVSwitch inside, 8 × 400 Gb/s NDR InfiniBand"
# The H100 rows whose model has a stored card: GPT-3 175B is the 2021 runs' 175 B shape.
H100_CARDS = {"gpt3-175b": "L96-h12288-a96-s2048-V51200"}
# NeMo's GPT-3 175B recipes: fused attention, sequence parallelism, the distributed optimizer
# (zero-1) and no recomputation; not stated beside the tables.
NEMO_ASSUMED = (
    "flash attention, sequence parallelism, the distributed optimizer (zero-1), no "
    "recomputation and the interleaved schedule: NeMo's recipe, not stated beside the table"
)


def stack_name(said: str) -> str:
    """The kit's name of a stack a source names: "NeMo 24.05 container ..." is "nemo-24.05",
    "Megatron-Bridge, 26.04 NeMo Container ..." is "megatron-bridge-26.04", and a patch
    release its release's ("NeMo 24.03.01 ..." is "nemo-24.03")."""
    words = said.replace(",", "").split()
    known = {"NeMo": "nemo", BRIDGE: "megatron-bridge"}
    if len(words) >= 2 and words[0] in known:
        return f"{known[words[0]]}-" + ".".join(words[1].split(".")[:2])
    if words and words[0] == MAXTEXT:  # its JAX container's date or release: "jax:25.01-..."
        container = next(w for w in words if w.startswith("nvcr.io/nvidia/jax:"))
        tag = container.split(":", 1)[1].removeprefix("maxtext-").split("-")
        release = ".".join(tag[:2]) if tag[0].isdigit() and len(tag[0]) == 4 else tag[0]
        return f"maxtext-{release}"
    raise GpkError(f"no stack is named for {said!r}")


@functools.lru_cache(maxsize=1)
def h100_runs() -> tuple[PublishedRun, ...]:
    """The H100 rows of `published_h100_runs.json` whose model has a stored card, as runs."""
    rows = h100_table()["runs"]
    return tuple(_h100_run(row) for row in rows if row["model_key"] in H100_CARDS)


@functools.lru_cache(maxsize=1)
def h100_table() -> dict[str, Any]:
    """`published_h100_runs.json` as stored: its models, rows and notes (read once)."""
    return json.loads(H100_RUNS_FILE.read_text())


def _reported_seconds(row: dict[str, Any]) -> float:
    """A row's published step: as reported, or its global batch's tokens over the tokens a
    second each GPU reports."""
    reported = row["reported"]
    if "step_time_s" in reported:
        return reported["step_time_s"]
    tokens = row["global_batch"] * row["sequence"]
    return tokens / (reported["tokens_per_s_per_gpu"] * row["gpus"])


def _source_text(row: dict[str, Any]) -> str:
    """Where a row's figures are read: "repo, path at commit: table"."""
    source = row["source"]
    return f"{source['repo']}, {source['path']} at {source['commit'][:8]}: {source['table']}"


def _h100_run(row: dict[str, Any]) -> PublishedRun:
    config = card_config(H100_CARDS[row["model_key"]])
    seconds, stack = _reported_seconds(row), stack_name(row["stack"])
    return PublishedRun(
        f"{row['model']} {row['precision'].upper()}, {row['gpus']} H100, {stack}",
        _source_text(row),
        config["layers"], config["hidden"], config["heads"], row["sequence"],
        config["vocabulary"], 175e9, row["gpus"], row["gpus_per_node"], "net400g", DGX_H100,
        row["dp"], row["tp"], row["pp"], row["micro_batch"], row["global_batch"],
        "interleaved" if (row["vp"] or 1) > 1 else "1f1b", row["vp"] or 1, "none", "zero-1",
        None, seconds, False, NEMO_ASSUMED, stack, "h100", row["precision"],
        FLASH, True,
    )  # fmt: skip


H100_CARDS_FILE = Path(__file__).with_name("published_h100_cards.json")
# The models of NVIDIA's recipes whose card `published_h100_cards.json` holds: dgxc's Llama 3.1
# 405B (the 126-block runs) and Nemotron-4 340B, NeMo 24.07's Llama 3 8B and 70B and
# Nemotron-4 340B, Megatron-Bridge's Llama 3 and 3.1 and mixtures of experts, and dgxc's MaxText
# Llama 2 and 3 70B.
RECIPE_MODELS = ("llama3.1-405b", "llama3-8b", "llama3-70b", "llama2-70b", "qwen3-30b-a3b",
                 "qwen3-235b-a22b", "gpt-oss-120b", "nemotron4-340b")  # fmt: skip
# MaxText's recipes of dgxc's rows: JAX's FSDP over every GPU (a hybrid of FSDP groups and
# replicas above 128 or 256 GPUs, moving the same bytes a step), cuDNN's flash attention, and
# whole blocks recomputed: the table does not say MaxText's recomputation, and by the kit's
# count only whole blocks recomputed fit the plans in 80 GB (31-38 GB, against 213-281 GB
# keeping every activation).
MAXTEXT_ASSUMED = (
    "JAX FSDP over the data axis (its gathers and reduce-scatters 1.5 all-reduces of the "
    "gradients' bytes, NCCL's rings spread over each node's network links), flash attention, "
    "whole blocks recomputed (the only recomputation by which the plan fits 80 GB): MaxText's "
    "GPU recipe as dgxc's README gives it, its recomputation not stated beside the table"
)
# Megatron-Bridge's recipes of these rows: fused attention, the distributed optimizer (zero-1),
# sequence parallelism where TP > 1, no recomputation, and in MoE runs every expert forced an
# even share of the tokens, none dropped (the archive's own note).
BRIDGE_ASSUMED = (
    "flash attention, the distributed optimizer (zero-1; Megatron FSDP where the table gives "
    "FSDP), sequence parallelism where TP > 1, no recomputation (gpt-oss recomputes its layer "
    "norms and expert activations only: not modelled); experts force-balanced and dropless "
    "(capacity factor 1), EP above DP folded over the tensor ranks (ETP 1): Megatron-Bridge's "
    "H100 recipes at 067f987d and the archive's note; the step from tokens/s/GPU"
)


def _card_key(row: dict[str, Any]) -> str:
    """The key of a row's model in `published_h100_cards.json`: its model's, or, where the
    benchmark ran other KV groups than the released model (dgxc's 405B ran 16), that shape's."""
    kv_heads = (row.get("benchmark_overrides") or {}).get("kv_heads")
    return f"{row['model_key']}-kv{kv_heads}" if kv_heads else row["model_key"]


def _recipe_rows(said: str) -> list[dict[str, Any]]:
    """The rows of `published_h100_runs.json` whose stack text starts with `said` and whose
    model has a counted card, the proxies of fewer blocks left out."""
    return [
        row
        for row in h100_table()["runs"]
        if row["model_key"] in RECIPE_MODELS and not row["proxy"] and row["stack"].startswith(said)
    ]


@functools.lru_cache(maxsize=1)
def llama_runs() -> tuple[PublishedRun, ...]:
    """The dense Llama rows of `published_h100_runs.json` from NVIDIA's NeMo recipes (dgxc and
    NeMo's performance summary) whose model has a counted card, the proxies of fewer blocks
    left out, as runs."""
    models = h100_table()["models"]
    return tuple(_recipe_run(row, models[row["model_key"]]) for row in _recipe_rows("NeMo"))


# Megatron-Bridge's rows the kit does not project, and why, by (model, pipeline stages); None:
# at any stages (docs/published-runs.md, "Megatron-Bridge's rows in the fit").
BRIDGE_HELD_OUT: dict[tuple[str, int | None], str] = {
    ("gpt-oss-120b", None): "its plan does not fit by the kit's count: keras-hub's gpt-oss card "
    "keeps 133 GB of activations on the first of 4 stages (the archive's run fits in 80 GB)",
    ("qwen3-30b-a3b", 2): "TP1 PP2 EP8 with 12 or 24 chunks of 1-2 blocks: the kit counts a "
    "pipeline's sends at its fill and drain only, not each chunk's, and the archive gives this "
    "plan 5,113 and 9,058 tokens/s/GPU a point release apart",
}


def _held_out(row: dict[str, Any]) -> bool:
    """Whether a Megatron-Bridge row is held out of the runs (`BRIDGE_HELD_OUT`)."""
    return any((row["model_key"], stages) in BRIDGE_HELD_OUT for stages in (None, row["pp"]))


@functools.lru_cache(maxsize=1)
def maxtext_runs() -> tuple[PublishedRun, ...]:
    """dgxc's MaxText rows (Llama 2 70B at 4,096 and Llama 3 70B at 8,192 tokens, FSDP over 64
    to 2,048 H100s, BF16 and FP8) as runs, each of its container's stack."""
    models = h100_table()["models"]
    return tuple(_recipe_run(row, models[row["model_key"]]) for row in _recipe_rows(MAXTEXT))


@functools.lru_cache(maxsize=2)
def bridge_runs(held_out: bool = False) -> tuple[PublishedRun, ...]:
    """The DGX-H100 pretraining rows of Megatron-Bridge's performance archive: Llama 3 and 3.1
    and the mixtures of experts Qwen3-30B-A3B and Qwen3-235B-A22B, as runs; with `held_out`,
    the rows of `BRIDGE_HELD_OUT` instead."""
    models = h100_table()["models"]
    rows = [row for row in _recipe_rows(BRIDGE) if _held_out(row) == held_out]
    return tuple(_recipe_run(row, models[row["model_key"]]) for row in rows)


def _recipe_run(row: dict[str, Any], model: dict[str, Any]) -> PublishedRun:
    """A row of NVIDIA's recipes as a run: NeMo's (its FLOPs NeMo's Llama formula) or
    Megatron-Bridge's (its FLOPs as it publishes them, beside its tokens)."""
    gpus, seconds, stack = row["gpus"], _reported_seconds(row), stack_name(row["stack"])
    stages, vp = row["pp"], row["vp"] or 1
    schedule = NO_PIPELINE if stages == 1 else ("interleaved" if vp > 1 else "1f1b")
    bridge = row["stack"].startswith(BRIDGE)
    release = row["stack"].split()[1] if bridge else ""
    name = f"{model['name']} {row['precision'].upper()}, {gpus} H100, "
    maxtext = row["stack"].startswith(MAXTEXT)
    assumed = BRIDGE_ASSUMED if bridge else MAXTEXT_ASSUMED if maxtext else NEMO_ASSUMED
    return PublishedRun(
        name + (f"{BRIDGE} {release}" if bridge else stack),
        _source_text(row),
        model["layers"], model["hidden"], model["heads"], row["sequence"], model["vocabulary"],
        0.0, gpus, min(row["gpus_per_node"], gpus), "net400g", DGX_H100,
        row["dp"], row["tp"], stages, row["micro_batch"], row["global_batch"], schedule,
        vp if stages > 1 else 1, "full" if maxtext else "none",
        "fsdp" if row.get("fsdp") else "zero-1",
        row["reported"]["model_tflops_per_gpu"] if bridge else None, seconds, False,
        assumed, stack, "h100", row["precision"], FLASH,
        row["tp"] > 1, row["cp"], model["ffn_hidden"],
        (row.get("benchmark_overrides") or {}).get("kv_heads", model["kv_heads"]),
        model["gated_mlp"], PUBLISHED_FLOPS if bridge else LLAMA_FLOPS, _card_key(row),
        _expert_axis(row), bool(model.get("experts")),
        _stage_blocks(model["layers"], stages, vp if stages > 1 else 1),
    )  # fmt: skip


def _stage_blocks(layers: int, stages: int, chunks: int) -> tuple[int, ...]:
    """Blocks per stage where the interleaved schedule's chunks do not divide the blocks:
    Megatron-Core then counts the embedding and the loss as a block each
    (`account_for_embedding_in_pipeline_split`, `account_for_loss_in_pipeline_split`), so the
    first stage and the last hold one block fewer (Llama 3.1 405B's 126 blocks on PP 8 VP 8:
    15, 16 × 6, 15). (): the kit's own split."""
    if chunks == 1 or layers % (stages * chunks) == 0:
        return ()
    if (layers + 2) % (stages * chunks):
        raise GpkError(
            f"{layers} blocks, with the embedding and the loss, do not fill {stages} stages of "
            f"{chunks} chunks evenly"
        )
    each = (layers + 2) // stages
    return (each - 1, *(each,) * (stages - 2), each - 1)


def _expert_axis(row: dict[str, Any]) -> int:
    """The kit's expert axis for a row's EP: inside the data axis where EP divides it, else
    folded over the tensor ranks as Megatron-Core's MoE parallel folding places it (ETP 1:
    Qwen3-235B-A22B's EP 32 over TP 2 × DP 16 is the kit's tensor 2, expert 16, each device
    holding 1/32 of the experts either way)."""
    expert = row.get("ep") or 1
    if row["dp"] % expert == 0:
        return expert
    folded = expert // row["tp"]
    if expert % row["tp"] or row["dp"] % folded or (row.get("etp") or 1) != 1:
        raise GpkError(
            f"{row['id']}: EP {expert} neither divides DP {row['dp']} nor folds over TP "
            f"{row['tp']} with ETP 1"
        )
    return folded


# NeMo's long-sequence table: Llama 2 7B in FP8 on DGX H100 at 4K to 1M tokens.
LONG_MODEL = "llama2-7b"
# What the table does not say of its runs' plans, taken from NeMo's recipes of the time.
LONG_ASSUMED = (
    "micro-batch 1 (the table gives none), flash attention, sequence parallelism where TP > 1, "
    "the distributed optimizer (zero-1), no recomputation, Megatron-Core's ring attention with "
    "causal load balancing; the FLOPs are NeMo's llama2 formula (full s² attention): not stated "
    "beside the table"
)


@functools.lru_cache(maxsize=1)
def long_sequence_runs() -> tuple[PublishedRun, ...]:
    """The "With CP" rows of NeMo's long-sequence table (`published_h100_runs.json`, model
    "llama2-7b"), 4K to 1M tokens, as runs; the rows of 4K to 16K ran with a context axis of
    1, which the table's "With CP" columns give."""
    found = h100_table()
    rows = [row for row in found["runs"] if row["model_key"] == LONG_MODEL and row["tp"]]
    return tuple(_long_run(row, found["models"][LONG_MODEL]) for row in rows)


def long_sequence_rows() -> list[dict[str, Any]]:
    """Every row of NeMo's long-sequence table as stored, "With CP" and "Without CP" alike:
    the latter's plan is not published (its "tp" is None)."""
    rows = h100_table()["runs"]
    return [row for row in rows if row["model_key"] == LONG_MODEL]


def _long_run(row: dict[str, Any], model: dict[str, Any]) -> PublishedRun:
    stack = stack_name(row["stack"])
    gpus, context, tensor = row["gpus"], row["cp"], row["tp"]
    return PublishedRun(
        f"Llama 2 7B FP8, {row['reported']['seq_len_k']}K, {gpus} H100, {stack}",
        _source_text(row),
        model["layers"], model["hidden"], model["heads"], row["sequence"], model["vocabulary"],
        6.74e9, gpus, min(row["gpus_per_node"], gpus), "net400g", DGX_H100, row["dp"], tensor,
        row["pp"], 1, row["global_batch"], "1f1b" if row["pp"] > 1 else NO_PIPELINE, 1, "none",
        "zero-1", row["reported"]["tflops_per_gpu"], None, False, LONG_ASSUMED, stack, "h100",
        row["precision"], FLASH, tensor > 1, context, model["ffn_hidden"], model["kv_heads"],
        model["gated_mlp"], LLAMA_FLOPS,
    )  # fmt: skip


def long_card_configs() -> dict[str, dict[str, int]]:
    """`llama_card`'s arguments for each sequence of NeMo's long-sequence table, by key."""
    model = h100_table()["models"][LONG_MODEL]
    found = {}
    for sequence in sorted({row["sequence"] for row in long_sequence_rows()}):
        config = {
            "layers": model["layers"], "hidden": model["hidden"], "heads": model["heads"],
            "kv_heads": model["kv_heads"], "intermediate": model["ffn_hidden"],
            "sequence": sequence, "vocabulary": model["vocabulary"],
        }  # fmt: skip
        found[llama_key(**config)] = config
    return found


def card_config(key: str) -> dict[str, int]:
    """`gpt_card`'s arguments for a stored card's key: a GPT with a 4·h MLP."""
    run = next((r for r in RUNS if r.card_key == key), None)
    if run is None:
        raise GpkError(f"no published run has the model {key!r}; use one of {card_keys()}")
    return {
        "layers": run.layers, "hidden": run.hidden, "heads": run.heads,
        "intermediate": 4 * run.hidden, "sequence": run.sequence, "vocabulary": run.vocabulary,
    }  # fmt: skip


def card_keys() -> list[str]:
    """Each published model once, in the order of `RUNS`."""
    return list(dict.fromkeys(run.card_key for run in RUNS))


@functools.lru_cache(maxsize=1)
def stored_cards() -> dict[str, dict[str, Any]]:
    """The counted cards, by key, as `benchmarks/published_runs.py` stored them."""
    return json.loads(CARDS.read_text())["cards"]


@functools.lru_cache(maxsize=1)
def stored_long_cards() -> dict[str, dict[str, Any]]:
    """The counted Llama cards of NeMo's long-sequence table, by key, as
    `benchmarks/published_runs.py --recount-long` stored them."""
    return json.loads(LONG_CARDS.read_text())["cards"]


def card(run: PublishedRun) -> ModelCard:
    """The run's model as counted by depth: a GPT's card from `published_cards.json`, a
    Llama's from `published_long_cards.json`."""
    cards, path, option = stored_cards(), CARDS, "--recount"
    if run.card_from:
        return _counted_card(run)
    if run.gated:
        cards, path, option = stored_long_cards(), LONG_CARDS, "--recount-long"
    if run.card_key not in cards:
        raise GpkError(
            f"{path.name} has no card {run.card_key!r}; run benchmarks/published_runs.py "
            f"{option} to count it"
        )
    stored = cards[run.card_key]
    # Megatron-LM's fused layer norms keep their 16-bit input; Keras's, as counted, keep float32
    # copies of their input and their normalised values: 12·s·h bytes more a block
    # (docs/planning.md, "The route").
    norms = KERAS_NORM_COPIES * run.sequence * run.hidden
    return ModelCard(
        **{
            **stored,
            "activation_bytes": stored["activation_bytes"] - norms,
            "precision": run.precision,
        },
        vocabulary=run.vocabulary,
    )


@functools.lru_cache(maxsize=1)
def stored_h100_cards() -> dict[str, dict[str, Any]]:
    """The cards `benchmarks/count_h100_cards.py --store` counted, by key."""
    return json.loads(H100_CARDS_FILE.read_text())["cards"]


def _counted_card(run: PublishedRun) -> ModelCard:
    """A run's card from `published_h100_cards.json`, less Keras's norm copies, at its
    precision."""
    stored = stored_h100_cards()[run.card_from]
    norms = KERAS_NORM_COPIES * run.sequence * run.hidden
    fields = {**stored, "rows": (), "activation_bytes": stored["activation_bytes"] - norms}
    if run.balanced_experts:
        fields["capacity_factor"] = 1.0
    return ModelCard(**{**fields, "precision": run.precision})


def cluster(run: PublishedRun) -> GPUCluster:
    """A cluster of A100 80 GB nodes like the run's: NVLink 3 inside, its network between, under
    the run's own software stack."""
    return GPUCluster(
        run.device, run.gpus // run.per_node, run.per_node, between=run.between, stack=run.stack
    )


def plan(run: PublishedRun) -> Plan:
    """The run's plan as the plan search names it: attention as written (these runs predate
    fused attention kernels in Megatron-LM), and Korthikanti et al.'s selective recomputation
    with sequence parallelism where the run used it."""
    micro_batches = run.global_batch // (run.data * run.micro_batch_size)
    return Plan(
        data=run.data,
        tensor=run.tensor,
        stages=run.stages,
        sharding=run.sharding,
        micro_batch_size=run.micro_batch_size,
        micro_batches=micro_batches,
        schedule=run.schedule,
        virtual_stages=run.virtual_stages,
        checkpointing=run.recompute,
        attention=run.attention,
        sequence_parallel=run.sequence_parallel,
        context=run.context,
        expert=run.expert,
        stage_blocks=run.stage_blocks,
    )


def published_flops(run: PublishedRun) -> float:
    """FLOPs of one iteration in the source's counting: Narayanan et al.'s
    (96 or 72)·B·s·L·h²·(1 + s/6h + V/16Lh) for a GPT; for a Llama (`LLAMA_FLOPS`), NeMo's
    `llama2` formula (`nemo/utils/flops_formulas.py`, Megatron-LM's
    `num_floating_point_operations` alike): B·s·L·h²·(12 + 12·g/a + 18·f/h + 12·s/h + 6·V/Lh),
    g the key-value heads and f the gated MLP's width, every score of s² counted (a causal
    kernel computes about half of them); where the source gives its TFLOP/s beside its step
    (`PUBLISHED_FLOPS`), the two multiplied."""
    B, s, L, h, V = run.global_batch, run.sequence, run.layers, run.hidden, run.vocabulary
    if run.flops_counted == PUBLISHED_FLOPS:
        return run.tflops_per_gpu * 1e12 * run.gpus * run.iteration_s
    if run.flops_counted == LLAMA_FLOPS:
        groups = (run.kv_heads or run.heads) / run.heads
        return (
            B
            * s
            * L
            * h
            * h
            * (12 + 12 * groups + 18 * run.intermediate / h + 12 * s / h + 6 * V / (L * h))
        )
    factor = 96 if run.recomputed_counted else 72
    return factor * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))


def published_tflops(run: PublishedRun) -> float:
    """The reported TFLOP/s per GPU, or the reported iteration's, in the paper's counting."""
    if run.tflops_per_gpu is not None:
        return run.tflops_per_gpu
    return published_flops(run) / (run.iteration_s * run.gpus) / 1e12


def project(run: PublishedRun, best: bool = True) -> dict[str, Any]:
    """The kit's projection of the run's own plan, in the paper's units, and its best plan.

    Returns a dict: the plan's fields, "kit_step_s" (the step time at the efficiency band's
    likely end), "kit_tflops_per_gpu" (the paper's FLOPs over that step), "published_tflops"
    and "published_step_s", "ratio" (kit ÷ published throughput), "ratio_low" and
    "ratio_high" (at the efficiency band's low and high ends), "memory_gb" and "fits"
    (within 90 % of 80 GB), "bound", the step's parts, and with `best`, "best" (the kit's
    fastest plan that fits, as `rank` gives it) and "why" (its parts against the run's).
    """
    model, gpus, used = card(run), cluster(run), plan(run)
    timed = step_time(model, used, gpus)
    total = memory(model, used).total
    kit = published_flops(run) / (timed.likely * run.gpus) / 1e12
    published = published_tflops(run)
    row: dict[str, Any] = {
        "name": run.name,
        "source": run.source,
        "stack": gpus.stack.name,
        **{field: getattr(used, field) for field in PLAN_FIELDS},
        "recompute": run.recompute,
        "kit_step_s": timed.likely,
        "published_step_s": published_flops(run) / (published * 1e12 * run.gpus),
        "kit_tflops_per_gpu": kit,
        "published_tflops": published,
        "ratio": kit / published,
        # the band's slow end (low efficiency) and fast end, as ratios too
        "ratio_low": timed.likely / timed.long * kit / published,
        "ratio_high": timed.likely / timed.short * kit / published,
        "memory_gb": total / 1e9,
        "fits": total <= gpus.device.memory_bytes * 0.9,
        "bound": timed.bound,
        **timed.parts.columns(),
    }
    if best:
        row.update(_best(model, gpus, run, row))
    return row


def _best(model: ModelCard, gpus: GPUCluster, run: PublishedRun, used: dict) -> dict[str, Any]:
    """The kit's fastest plan that fits, and why it is faster than the run's."""
    try:
        ranked = rank(model, gpus, run.global_batch, attention=run.attention)
    except GpkError as error:  # no plan divides the model's blocks and the batch
        return {"best": None, "best_step_s": None, "why": str(error)}
    fastest = next((r for r in ranked if r["fits"]), None)
    if fastest is None:
        return {"best": None, "best_step_s": None, "why": "no plan fits"}
    return {
        "best": {k: fastest[k] for k in PLAN_FIELDS},
        "best_step_s": fastest["step_time_s"],
        "why": _why(used, fastest),
    }


def _why(used: dict[str, Any], best: dict[str, Any]) -> str:
    """The best plan's step against the run's, part by part, the largest change first."""
    changes = sorted(((best[p] - used[p], p[:-2]) for p in PARTS), key=lambda c: -abs(c[0]))
    said = [f"{name} {delta:+.2f} s" for delta, name in changes if abs(delta) >= 0.005]
    if not said:
        return "the same step"
    return ", ".join(said[:3])


def runs_table(best: bool = True) -> list[dict[str, Any]]:
    """`project` of every published run, the A100 runs of `RUNS` first, then the H100 rows
    the kit can count (`h100_runs`, `llama_runs`; Megatron-Bridge's are fitted by stack
    alone, `efficiency_fit.leave_one_out_by_stack`)."""
    return [project(run, best) for run in RUNS + h100_runs() + llama_runs()]


def as_record(run: PublishedRun) -> dict[str, Any]:
    """The run as plain data."""
    return asdict(run)
