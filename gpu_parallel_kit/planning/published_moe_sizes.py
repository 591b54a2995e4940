"""Released mixtures of experts' published parameter counts, total and active, against the plan
search's card of the same shape.

Each `PublishedMoeSize` holds a released model's figures as its makers publish them and its
shape as keras-hub's backbone takes it. `benchmarks/moe_active_parameters.py` builds the
backbone with its weights deferred and reads what the search's count reads of its weights (the
parameters, the structure, the experts); `weights_card` makes the card of that reading and
`compare` holds it against the figures. Sources and what each count holds:
`docs/published-runs.md`, "Active parameters of released mixtures of experts".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..analysis.cost_model.model_card import TRAINING_FLOPS_PER_WEIGHT, ModelCard, model_card
from ..errors import GpkError

QWEN_MOE_SOURCE = "Qwen1.5-MoE-A2.7B model card (Hugging Face), Model Details; config.json"
GPT_OSS_SOURCE = "gpt-oss-120b & gpt-oss-20b Model Card (OpenAI, arXiv 2508.10925), Table 1"


@dataclass(frozen=True)
class PublishedMoeSize:
    """A released mixture of experts: its published parameters and its keras-hub shape.

    Args:
        name: the released model's name.
        source: where the figures are read (document, table or section).
        backbone: the keras-hub backbone class that builds it, `keras_hub.models.<backbone>`.
        config: the backbone's arguments at the released shape (its config.json's).
        total: published total parameters.
        active: published parameters one token goes through.
        embedding_active: whether the published active count holds the input embedding
            (OpenAI's leaves it out and counts the unembedding).
    """

    name: str
    source: str = field(repr=False)
    backbone: str
    config: dict[str, Any] = field(repr=False)
    total: float
    active: float
    embedding_active: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.active <= self.total:
            raise GpkError(
                f"{self.name}: active={self.active:g} is not between 0 and total={self.total:g}; "
                "give the parameters one token goes through, e.g. 5.13e9 of gpt-oss-120b's "
                "116.83e9"
            )

    def build(self) -> Any:
        """The backbone at the released shape (random weights: build it under
        `keras.StatelessScope(initialize_variables=False)` to allocate none)."""
        import keras_hub

        return getattr(keras_hub.models, self.backbone)(**self.config)

    def counted_active(self, card: ModelCard) -> float:
        """The card's active parameters as the source counts them: without the input
        embedding (vocabulary × width) where the source leaves it out."""
        embedding = 0.0 if self.embedding_active else float(card.vocabulary * card.hidden)
        return card.active_parameters - embedding


QWEN1_5_MOE_A2_7B = PublishedMoeSize(
    name="Qwen1.5-MoE-A2.7B",
    source=QWEN_MOE_SOURCE,
    backbone="QwenMoeBackbone",
    # Qwen/Qwen1.5-MoE-A2.7B's config.json; `intermediate_dim` builds no block (all are MoE)
    config=dict(
        vocabulary_size=151936,
        num_layers=24,
        num_query_heads=16,
        num_key_value_heads=16,
        hidden_dim=2048,
        intermediate_dim=5632,
        moe_intermediate_dim=1408,
        shared_expert_intermediate_dim=5632,
        num_experts=60,
        top_k=4,
    ),
    total=14.3e9,
    active=2.7e9,
)
GPT_OSS_120B = PublishedMoeSize(
    name="gpt-oss-120b",
    source=GPT_OSS_SOURCE,
    backbone="GptOssBackbone",
    # openai/gpt-oss-120b's config.json; its RoPE settings change no parameter
    config=dict(
        vocabulary_size=201088,
        num_layers=36,
        num_query_heads=64,
        num_key_value_heads=8,
        hidden_dim=2880,
        intermediate_dim=2880,
        num_experts=128,
        top_k=4,
        head_dim=64,
        sliding_window=128,
    ),
    total=116.83e9,
    active=5.13e9,
    embedding_active=False,
)
GPT_OSS_20B = PublishedMoeSize(
    name="gpt-oss-20b",
    source=GPT_OSS_SOURCE,
    backbone="GptOssBackbone",
    config={**GPT_OSS_120B.config, "num_layers": 24, "num_experts": 32},
    total=20.91e9,
    active=3.61e9,
    embedding_active=False,
)
PUBLISHED_MOE_SIZES = (QWEN1_5_MOE_A2_7B, GPT_OSS_120B, GPT_OSS_20B)


@dataclass(frozen=True)
class SizeComparison:
    """A card's parameters against a released model's published ones."""

    size: PublishedMoeSize
    total: float  # the card's parameters
    active: float  # the card's active parameters, counted as the source counts them

    @property
    def total_ratio(self) -> float:
        return self.total / self.size.total

    @property
    def active_ratio(self) -> float:
        return self.active / self.size.active


def weights_card(count: dict[str, Any], name: str) -> ModelCard:
    """The card of a model counted by its weights alone, its step not traced.

    Args:
        count: "parameters" (trainable, as `worker/jax/abstract_count` counts them),
            "structure" (`worker/jax/plan_count.structure`) and "experts"
            (`worker/expert_banks.expert_structure`) of the model built with its weights
            deferred.
        name: the model's name, for sentences.

    Returns:
        The card of one token: its FLOPs 6 a weight, as a count of the dense banks gives them
        (the attention's left out), scaled to the routed experts as the search scales them.
    """
    flops = TRAINING_FLOPS_PER_WEIGHT * float(count["parameters"])
    return model_card(
        {**count, "flops": flops, "kept_bytes": 0.0}, "bf16", "adam", name, sequence=1
    )


def compare(size: PublishedMoeSize, card: ModelCard) -> SizeComparison:
    """The card's total and active parameters against `size`'s published ones."""
    return SizeComparison(size, card.parameters, size.counted_active(card))


def markdown(comparisons: list[SizeComparison]) -> str:
    """The comparisons as the docs' table: published and counted, total and active."""
    lines = [
        "| model | published total | kit total | ratio | published active | kit active | ratio "
        "| source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in comparisons:
        lines.append(
            f"| {c.size.name} | {c.size.total / 1e9:.2f} B | {c.total / 1e9:.3f} B | "
            f"{c.total_ratio:.3f} | {c.size.active / 1e9:.2f} B | {c.active / 1e9:.3f} B | "
            f"{c.active_ratio:.3f} | {c.size.source} |"
        )
    return "\n".join(lines)
