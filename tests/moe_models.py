"""Tiny keras-hub mixtures of experts built from a config (random weights, nothing downloaded):
Mixtral and Qwen3-MoE, 4 experts, top 2, each with a small classification head, and token
arrays to feed them.

Importable, so workers unpickle the builders by reference. keras-hub is imported inside each
builder: the test process itself never imports it.
"""

from __future__ import annotations

from tests.hub_models import SEQUENCE, VOCABULARY, _classifier, tokens

EXPERTS, TOP_K = 4, 2
SIZE = dict(num_layers=2, hidden_dim=32, num_query_heads=4, num_key_value_heads=2)
INPUTS = ("token_ids", "padding_mask")


def mixtral(router_aux_loss_coef: float = 0.02):
    import keras_hub

    backbone = keras_hub.models.MixtralBackbone(
        vocabulary_size=VOCABULARY,
        intermediate_dim=64,
        num_experts=EXPERTS,
        top_k=TOP_K,
        sliding_window=8,
        router_aux_loss_coef=router_aux_loss_coef,
        **SIZE,
    )
    return _classifier(backbone, INPUTS)


def mixtral_without_router_loss():
    """Mixtral without its load-balancing loss: the weights it trains show what the loss moves."""
    return mixtral(router_aux_loss_coef=0.0)


def qwen3_moe():
    import keras_hub

    backbone = keras_hub.models.Qwen3MoeBackbone(
        vocabulary_size=VOCABULARY,
        intermediate_dim=64,
        moe_intermediate_dim=48,
        num_experts=EXPERTS,
        top_k=TOP_K,
        head_dim=8,
        **SIZE,
    )
    return _classifier(backbone, INPUTS)


BUILDERS = {"mixtral": mixtral, "qwen3_moe": qwen3_moe}
# One block's expert bank in float32: experts × 3 kernels (gate, up, down) of width × FFN.
EXPERT_BYTES_PER_BLOCK = {
    "mixtral": EXPERTS * 3 * SIZE["hidden_dim"] * 64 * 4,
    "qwen3_moe": EXPERTS * 3 * SIZE["hidden_dim"] * 48 * 4,
}


def moe_tokens(samples: int = 64, seed: int = 0):
    """(x, y): token ids and a padding mask, and a class per sequence."""
    return tokens("mixtral", samples, seed)


__all__ = [
    "BUILDERS",
    "SEQUENCE",
    "mixtral",
    "mixtral_without_router_loss",
    "moe_tokens",
    "qwen3_moe",
]
