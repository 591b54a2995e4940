"""The models of the published H100 runs (`published_h100_runs.json`) as keras-hub builds them:
each one's backbone and config at its released shape, the sequence its runs ran at, and its
published parameter counts, total and active, to hold the counted card against.

`benchmarks/count_h100_cards.py` counts each card by depth (`worker/jax/hub_cards.py`: two small
depths at full width, one sample, `mixed_bfloat16`) and keeps it in `published_h100_cards.json`,
keyed by the runs' `model_key`; `tests/planning/test_h100_cards.py` holds the kept cards against
these figures. A model no keras-hub backbone builds at its shape is in `UNCOUNTED`, with why.
Sources: docs/published-runs.md, "H100 runs, from NVIDIA's recipes", "The models' cards".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GpkError
from .published_moe_sizes import GPT_OSS_120B

H100_CARDS = Path(__file__).with_name("published_h100_cards.json")
H100_RUNS = Path(__file__).with_name("published_h100_runs.json")
TOLERANCE = 0.02  # a card's parameters against the published ones, relative

NEMO = "NVIDIA/NeMo nemo/collections/llm/gpt/model/{} @ 8cfedd7203462cb251a914e700e5605444277561"
LLAMA3_PAPER = "The Llama 3 Herd of Models (Meta, arXiv 2407.21783), Table 3"


@dataclass(frozen=True)
class HubModel:
    """A published run's model as a keras-hub backbone builds it.

    Args:
        key: the runs' `model_key` in `published_h100_runs.json`.
        name: the released model's name.
        backbone: the class in `keras_hub.models` that builds it.
        config: the backbone's arguments at the released shape.
        sequence: the tokens per sample its runs ran at.
        total: published total parameters.
        active: published parameters one token goes through (a mixture of experts), else None.
        embedding_active: whether the published active count holds the input embedding.
        config_source: where the shape is read.
        published_source: where the parameter counts are read.
        note: what the count holds that a run differs in, if anything.
    """

    key: str
    name: str
    backbone: str
    config: dict[str, Any] = field(repr=False)
    sequence: int
    total: float
    active: float | None = None
    embedding_active: bool = True
    config_source: str = field(default="", repr=False)
    published_source: str = field(default="", repr=False)
    note: str = field(default="", repr=False)

    def counted_active(self, card: dict[str, Any]) -> float:
        """A stored card's active parameters as the source counts them: without the input
        embedding (vocabulary × width) where the source leaves it out."""
        from ..analysis.cost_model.model_card import ModelCard

        active = ModelCard(**card).active_parameters
        return active - (
            0.0 if self.embedding_active else float(card["vocabulary"] * card["hidden"])
        )


def _llama(vocabulary: int, layers: int, hidden: int, heads: int, kv: int, ffn: int) -> dict:
    return dict(
        vocabulary_size=vocabulary,
        num_layers=layers,
        num_query_heads=heads,
        hidden_dim=hidden,
        intermediate_dim=ffn,
        num_key_value_heads=kv,
        tie_word_embeddings=False,
    )


def _qwen3_moe(layers: int, hidden: int, heads: int, ffn: int, moe_ffn: int) -> dict:
    return dict(
        vocabulary_size=151936,
        num_layers=layers,
        num_query_heads=heads,
        num_key_value_heads=4,
        head_dim=128,
        hidden_dim=hidden,
        intermediate_dim=ffn,  # the config's dense size: every block is MoE, so builds none
        moe_intermediate_dim=moe_ffn,
        num_experts=128,
        top_k=8,
        norm_top_k_prob=True,
        tie_word_embeddings=False,
    )


# Nemotron-4 340B's squared-ReLU MLP of 73,728 as a gated MLP of as many weights.
NEMOTRON_GATED_FFN = 2 * 73728 // 3
QWEN3_CARD = "Qwen/{} model card (Hugging Face), Model Overview: Number of Parameters"
HUB_MODELS = (
    HubModel(
        "llama3-8b",
        "Llama 3 8B",
        "Llama3Backbone",
        _llama(128256, 32, 4096, 32, 8, 14336),
        8192,
        8.0e9,
        config_source=NEMO.format("llama.py (Llama3Config8B)")
        + "; meta-llama/Meta-Llama-3-8B config.json",
        published_source=LLAMA3_PAPER + " (8B)",
    ),
    HubModel(
        "llama3-70b",
        "Llama 3 70B",
        "Llama3Backbone",
        _llama(128256, 80, 8192, 64, 8, 28672),
        8192,
        70e9,
        config_source=NEMO.format("llama.py (Llama3Config70B)")
        + "; meta-llama/Meta-Llama-3-70B config.json",
        published_source=LLAMA3_PAPER + " (70B)",
    ),
    HubModel(
        "llama3.1-405b",
        "Llama 3.1 405B",
        "Llama3Backbone",
        _llama(128256, 126, 16384, 128, 8, 53248),
        8192,
        405e9,
        config_source=NEMO.format("llama.py (Llama31Config405B)") + "; " + LLAMA3_PAPER,
        published_source=LLAMA3_PAPER + " (405B)",
        note=(
            "the released model's 8 KV heads; DGX Cloud Benchmarking's runs set 16 query groups "
            "(llama3.1/llama3.1_405b.yaml), counted as llama3.1-405b-kv16"
        ),
    ),
    HubModel(
        "llama3.1-405b-kv16",
        "Llama 3.1 405B, 16 KV groups (dgxc)",
        "Llama3Backbone",
        _llama(128256, 126, 16384, 128, 16, 53248),
        8192,
        405e9,
        config_source=NEMO.format("llama.py (Llama31Config405B)")
        + "; NVIDIA/dgxc-benchmarking llama3.1/llama3.1_405b.yaml @ 35a9aec (num_query_groups 16)",
        published_source=LLAMA3_PAPER + " (405B, of the released model's 8 KV heads)",
        note=(
            "the dgxc benchmark's shape: 16 KV groups, 4.2 B parameters more than the released "
            "model; the Llama 3 vocabulary kept (its GPT-2 BPE tokenizer is a data proxy)"
        ),
    ),
    HubModel(
        "llama2-70b",
        "Llama 2 70B",
        "LlamaBackbone",
        _llama(32000, 80, 8192, 64, 8, 28672),
        4096,
        70e9,
        config_source="NVIDIA/dgxc-benchmarking maxtext/README_70b.md @ 35a9aec, Notes; "
        "meta-llama/Llama-2-70b-hf config.json",
        published_source="Llama 2: Open Foundation and Fine-Tuned Chat Models (Meta, arXiv "
        "2307.09288), Table 1 (70B)",
    ),
    HubModel(
        "qwen3-30b-a3b",
        "Qwen3-30B-A3B",
        "Qwen3MoeBackbone",
        _qwen3_moe(48, 2048, 32, 6144, 768),
        4096,
        30.5e9,
        3.3e9,
        config_source=NEMO.format("qwen3.py (Qwen3Config30B_A3B)")
        + "; Qwen/Qwen3-30B-A3B config.json",
        published_source=QWEN3_CARD.format("Qwen3-30B-A3B") + " (30.5B total, 3.3B activated)",
    ),
    HubModel(
        "qwen3-235b-a22b",
        "Qwen3-235B-A22B",
        "Qwen3MoeBackbone",
        _qwen3_moe(94, 4096, 64, 12288, 1536),
        4096,
        235e9,
        22e9,
        config_source=NEMO.format("qwen3.py (Qwen3Config235B_A22B)")
        + "; Qwen/Qwen3-235B-A22B config.json",
        published_source=QWEN3_CARD.format("Qwen3-235B-A22B") + " (235B total, 22B activated)",
    ),
    HubModel(
        "gpt-oss-120b",
        "gpt-oss-120b",
        "GptOssBackbone",
        dict(GPT_OSS_120B.config),
        4096,
        GPT_OSS_120B.total,
        GPT_OSS_120B.active,
        embedding_active=False,
        config_source=NEMO.format("gpt_oss.py (GPTOSSConfig120B)")
        + "; openai/gpt-oss-120b config.json",
        published_source=GPT_OSS_120B.source,
    ),
    HubModel(
        "nemotron4-340b",
        "Nemotron-4 340B",
        "LlamaBackbone",
        _llama(256000, 96, 18432, 96, 8, NEMOTRON_GATED_FFN),
        4096,
        341e9,
        config_source=NEMO.format("nemotron.py (Nemotron4Config340B)")
        + "; Nemotron-4 340B Technical Report (NVIDIA, arXiv 2406.11704), Table 1",
        published_source="Nemotron-4 340B Technical Report (NVIDIA, arXiv 2406.11704), "
        "section 2.1 (9.4 B embedding and 331.6 B non-embedding parameters)",
        note=(
            "keras-hub has no Nemotron, and none of its backbones pairs grouped KV heads with "
            "an ungated MLP: counted as a Llama block whose gated MLP is two-thirds as wide "
            "(3 × 18,432 × 49,152 weights, as many as Nemotron's squared-ReLU MLP of 2 × "
            "18,432 × 73,728, and the same matmul FLOPs); what differs is the MLP's "
            "activations (two inputs of 49,152 kept where Nemotron keeps one of 73,728, a "
            "third more) and its elementwise work"
        ),
    ),
)
BY_KEY = {model.key: model for model in HUB_MODELS}
# Models of the runs no keras-hub backbone builds at their shape, and why (none now).
UNCOUNTED: dict[str, str] = {}


def load_cards(path: Path = H100_CARDS) -> dict[str, Any]:
    """The kept cards file: {"cards": {key: card fields}, "counted": {key: how}}."""
    try:
        return json.loads(path.read_text())
    except OSError:
        raise GpkError(
            f"{path.name} is not there; count the cards with "
            "`python benchmarks/count_h100_cards.py --store`"
        ) from None


def run_sequences(path: Path = H100_RUNS) -> dict[str, set[int]]:
    """Each model key's sequences in the published runs."""
    found: dict[str, set[int]] = {}
    for run in json.loads(path.read_text())["runs"]:
        found.setdefault(run["model_key"], set()).add(run["sequence"])
    return found
