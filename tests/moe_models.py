"""Tiny keras-hub mixtures of experts built from a config (random weights, nothing downloaded):
the six MoE families of keras-hub 0.32 (Mixtral, Qwen-MoE, Qwen3-MoE, Qwen3.5-MoE, gpt-oss and
Gemma 4), 4 experts, top 2, each with a small classification head, and token arrays to feed
them. Qwen3-MoE keeps its first layer dense (`mlp_only_layers`), so one of its two layers is MoE
(keras-hub 0.32's Qwen-MoE builds every layer as layer 0, so its `mlp_only_layers` and
`decoder_sparse_step` turn all its layers dense or none: it is left all MoE).

Importable, so workers unpickle the builders by reference. keras-hub is imported inside each
builder: the test process itself never imports it.
"""

from __future__ import annotations

from tests.hub_models import SEQUENCE, VOCABULARY, _classifier, tokens

EXPERTS, TOP_K = 4, 2
SIZE = dict(num_layers=2, hidden_dim=32, num_query_heads=4, num_key_value_heads=2)
INPUTS = ("token_ids", "padding_mask")


def mixtral(router_aux_loss_coef: float = 0.02, router_jitter_noise: float = 0.0):
    import keras_hub

    backbone = keras_hub.models.MixtralBackbone(
        vocabulary_size=VOCABULARY,
        intermediate_dim=64,
        num_experts=EXPERTS,
        top_k=TOP_K,
        sliding_window=8,
        router_aux_loss_coef=router_aux_loss_coef,
        router_jitter_noise=router_jitter_noise,
        **SIZE,
    )
    return _classifier(backbone, INPUTS)


def mixtral_without_router_loss():
    """Mixtral without its load-balancing loss: the weights it trains show what the loss moves."""
    return mixtral(router_aux_loss_coef=0.0)


def mixtral_with_jitter():
    """Mixtral whose router multiplies its inputs by random noise in training."""
    return mixtral(router_jitter_noise=0.1)


def mixtral_with_mixing_experts():
    """Mixtral whose banks add to each expert's output a tenth of the mean of every expert's: a
    block whose output reads experts its tokens are not routed to, which dispatching changes."""
    from keras_hub.src.models.mixtral.mixtral_decoder import MixtralMoeExperts

    return _with_mixing_experts(mixtral(), MixtralMoeExperts)


def gpt_oss_with_mixing_experts():
    """gpt-oss whose banks are altered as `mixtral_with_mixing_experts` alters Mixtral's."""
    from keras_hub.src.models.gpt_oss.gpt_oss_decoder import GptOssExperts

    return _with_mixing_experts(gpt_oss(), GptOssExperts)


def _with_mixing_experts(model, bank_class):
    """`model` with each bank of `bank_class` adding a tenth of every expert's mean output to
    each expert's."""
    from keras import ops

    class MixingExperts(bank_class):
        def call(self, hidden_states):
            out = super().call(hidden_states)
            return out + 0.1 * ops.mean(out, axis=0, keepdims=True)

    for layer in model._flatten_layers():
        if type(layer) is bank_class:
            layer.__class__ = MixingExperts
    return model


def qwen3_moe():
    import keras_hub

    backbone = keras_hub.models.Qwen3MoeBackbone(
        vocabulary_size=VOCABULARY,
        intermediate_dim=64,
        moe_intermediate_dim=48,
        num_experts=EXPERTS,
        top_k=TOP_K,
        head_dim=8,
        mlp_only_layers=[0],
        **SIZE,
    )
    return _classifier(backbone, INPUTS)


def qwen_moe():
    """Qwen-MoE: a shared expert gated by a sigmoid beside the routed ones."""
    import keras_hub

    backbone = keras_hub.models.QwenMoeBackbone(
        vocabulary_size=VOCABULARY,
        intermediate_dim=64,
        moe_intermediate_dim=48,
        shared_expert_intermediate_dim=40,
        num_experts=EXPERTS,
        top_k=TOP_K,
        **SIZE,
    )
    return _classifier(backbone, INPUTS)


def qwen3_5_moe():
    """Qwen3.5-MoE: a gated shared expert. Its linear-attention layers (keras-hub's default for
    three layers in four) compile for minutes on a CPU and route nothing: full attention only."""
    import keras_hub

    backbone = keras_hub.models.Qwen3_5MoeBackbone(
        vocabulary_size=VOCABULARY,
        head_dim=8,
        moe_intermediate_dim=48,
        shared_expert_intermediate_size=40,
        num_experts=EXPERTS,
        top_k=TOP_K,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        layer_types=["full_attention"] * SIZE["num_layers"],
        **SIZE,
    )
    return _classifier(backbone, INPUTS)


def gpt_oss():
    """gpt-oss: biases on the experts, a clamped gated activation, softmax over the top-k."""
    import keras_hub

    backbone = keras_hub.models.GptOssBackbone(
        vocabulary_size=VOCABULARY,
        intermediate_dim=48,
        num_experts=EXPERTS,
        top_k=TOP_K,
        head_dim=8,
        sliding_window=8,
        **SIZE,
    )
    return _classifier(backbone, INPUTS)


def gemma4():
    """Gemma 4: a normalised router, per-expert output scales, the bank summing its experts
    itself beside a dense feed-forward. Its banks start at zero in keras-hub (a checkpoint
    fills them), so they are drawn here, the same each build."""
    import keras_hub
    import numpy as np

    backbone = keras_hub.models.Gemma4Backbone(
        vocabulary_size=VOCABULARY,
        image_size=None,
        intermediate_dim=64,
        head_dim=8,
        enable_moe_block=True,
        num_experts=EXPERTS,
        expert_intermediate_dim=48,
        num_experts_per_token=TOP_K,
        sliding_window_size=8,
        **SIZE,
    )
    rng = np.random.default_rng(7)
    for weight in backbone.weights:
        if "moe_expert_bank" in weight.path and len(weight.shape) == 3:
            weight.assign(rng.normal(0.0, 0.2, weight.shape).astype("float32"))
    return _classifier(backbone, GEMMA4_INPUTS)


GEMMA4_INPUTS = ("token_ids", "padding_mask", "position_ids")
BUILDERS = {
    "mixtral": mixtral,
    "qwen_moe": qwen_moe,
    "qwen3_moe": qwen3_moe,
    "qwen3_5_moe": qwen3_5_moe,
    "gpt_oss": gpt_oss,
    "gemma4": gemma4,
}
MOE_LAYERS = {"qwen3_moe": 1}  # MoE layers where not every one of the two is
# One block's expert bank in float32: experts × 3 kernels (gate, up, down) of width × FFN.
EXPERT_BYTES_PER_BLOCK = {  # used for Mixtral's pipeline on a mesh
    "mixtral": EXPERTS * 3 * SIZE["hidden_dim"] * 64 * 4,
    "qwen3_moe": EXPERTS * 3 * SIZE["hidden_dim"] * 48 * 4,
}


def moe_tokens(samples: int = 64, seed: int = 0, family: str = "mixtral"):
    """(x, y): token ids and a padding mask (and positions, for Gemma 4), and a class per
    sequence."""
    return tokens("gemma4" if family == "gemma4" else "mixtral", samples, seed)


__all__ = [
    "BUILDERS",
    "gpt_oss_with_mixing_experts",
    "MOE_LAYERS",
    "SEQUENCE",
    "mixtral",
    "mixtral_with_jitter",
    "mixtral_with_mixing_experts",
    "mixtral_without_router_loss",
    "moe_tokens",
    "qwen3_moe",
]
