"""A published mixture-of-experts training run on GPUs, and the plan search's projection of it.

Megatron-Core's MoE README gives Mixtral 8×7B's throughput in bf16 and a reference parallel
mapping on 64 H100s. The model's card is counted by `benchmarks/search_mixtral.py --store`
(keras-hub's `MixtralBackbone` at that shape, one 4,096-token sample, counted by depth) and kept
in `published_moe_cards.json`. Sources and what the ratio shows: `docs/published-runs.md`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..analysis.cost_model.gpu_cluster import GPUCluster
from ..analysis.cost_model.model_card import ModelCard
from ..analysis.cost_model.parallel_plan import Plan
from ..analysis.cost_model.parallel_plan_memory import memory
from ..analysis.cost_model.parallel_plan_step_time import step_time
from ..errors import GpkError

MOE_CARDS = Path(__file__).with_name("published_moe_cards.json")
MEGATRON_CORE_MOE = (
    "Megatron-Core's MoE README (NVIDIA/Megatron-LM, megatron/core/transformer/moe/README.md, "
    "read at commit 022bcb5a): 468 TFLOPS for Mixtral 8x7B bf16 (MCore v0.9); reference "
    "mapping (MCore v0.8): 64 H100 80 GB, sequence 4096, TP 1, EP 8, PP 4, VP 8, MBS 1, GBS 256"
)


@dataclass(frozen=True)
class PublishedMoeRun:
    """One published MoE run: its model's card key, its GPUs, its plan and its throughput.

    Args:
        name: how tables name the run.
        source: where its figures are read.
        card_key: its counted card in `published_moe_cards.json`.
        nodes, per_node, device, between: the cluster, as `GPUCluster` takes it.
        plan: the run's plan, as the kit's `Plan` writes it.
        tflops_per_gpu: the published TFLOP/s per GPU.
    """

    name: str
    source: str
    card_key: str
    nodes: int
    per_node: int
    device: str
    between: str
    plan: Plan = field(repr=False)
    tflops_per_gpu: float

    @property
    def cluster(self) -> GPUCluster:
        return GPUCluster(self.device, self.nodes, self.per_node, between=self.between)


MIXTRAL_8X7B = PublishedMoeRun(
    name="Mixtral 8x7B, 64 H100 (Megatron-Core)",
    source=MEGATRON_CORE_MOE,
    card_key="mixtral-8x7b-s4096",
    nodes=8,
    per_node=8,
    device="h100",
    between="net400g",  # 8 × 400 Gb/s InfiniBand a node: one 400 Gb/s adapter per GPU
    # The distributed optimizer as zero-1; VP 8 as 8 chunks a device; dropless, flash attention.
    plan=Plan(
        data=16,
        tensor=1,
        stages=4,
        sharding="zero-1",
        micro_batch_size=1,
        micro_batches=16,
        schedule="interleaved",
        virtual_stages=8,
        checkpointing="none",
        attention="flash",
        expert=8,
    ),
    tflops_per_gpu=468.0,
)


def moe_card(run: PublishedMoeRun = MIXTRAL_8X7B) -> ModelCard:
    """The run's model card, as `benchmarks/search_mixtral.py --store` counted it."""
    try:
        cards = json.loads(MOE_CARDS.read_text())["cards"]
        return ModelCard(**cards[run.card_key])
    except (OSError, KeyError) as error:
        raise GpkError(
            f"{MOE_CARDS.name} has no card {run.card_key!r} ({error}); run "
            "benchmarks/search_mixtral.py --store"
        ) from None


def store_card(card: ModelCard, run: PublishedMoeRun = MIXTRAL_8X7B, how: str = "") -> None:
    """Keep `card` as the run's counted card."""
    MOE_CARDS.write_text(
        json.dumps({"counted": how, "cards": {run.card_key: asdict(card)}}, indent=1) + "\n"
    )


def project_moe(run: PublishedMoeRun = MIXTRAL_8X7B, card: ModelCard | None = None) -> dict:
    """The run's plan sized and timed on its cluster: "tflops_per_gpu" (the card's FLOPs over
    the projected step), "ratio" to the published figure, "step_time_s", "memory_bytes"."""
    card = card or moe_card(run)
    timed = step_time(card, run.plan, run.cluster)
    tflops = timed.model_tflops_per_device
    return {
        "tflops_per_gpu": tflops,
        "ratio": tflops / run.tflops_per_gpu,
        "step_time_s": timed.likely,
        "memory_bytes": memory(card, run.plan).total,
    }
