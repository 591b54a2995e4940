"""The plan search's card of keras-hub's mixtures of experts, read off models built with their
weights deferred: each of keras-hub 0.32's six MoE families built tiny from a config, against a
count by hand of its built weights; and three released models at their published shapes,
against their published total and active parameters (`planning/published_moe_sizes.py`,
docs/published-runs.md).

One fresh process with Keras on JAX and TensorFlow kept out (keras-hub would import it) reads
all nine, as `tests/jax/test_abstract_count.py` counts, and prints what the search's children
read of each: the parameters, the structure, the experts (`worker/expert_banks.py`). About 15 s
on two cores, keras-hub's import most of it.
"""

from __future__ import annotations

import math
import textwrap

import pytest

from gpu_parallel_kit.planning.published_moe_sizes import (
    GPT_OSS_20B,
    GPT_OSS_120B,
    PUBLISHED_MOE_SIZES,
    compare,
    weights_card,
)
from tests.jax.json_child import run_json_script

pytestmark = pytest.mark.slow

EXPERTS, TOP_K = 4, 2
TOLERANCE = 0.02  # the card's parameters against the published ones, relative
# Where each family keeps its routed experts, read off keras-hub's sources; its shared expert
# (Qwen-MoE, Qwen3.5-MoE) is named "shared_expert…" beside it.
BANKS = {
    "mixtral": "/experts/",
    "qwen_moe": "/experts/",
    "qwen3_moe": "/experts/",
    "qwen3_5_moe": "/experts/",
    "gpt_oss": "/experts/",
    "gemma4": "/moe_expert_bank/",
}
SHARED = ("qwen_moe", "qwen3_5_moe")

SCRIPT = textwrap.dedent(
    """
    import json, math, os, sys

    import keras, keras_hub
    from gpu_parallel_kit.planning.published_moe_sizes import PUBLISHED_MOE_SIZES
    from gpu_parallel_kit.worker.expert_banks import expert_structure
    from gpu_parallel_kit.worker.jax.plan_count import structure

    E, K = EXPERTS, TOP_K
    SIZE = dict(vocabulary_size=100, num_layers=2, hidden_dim=32, num_query_heads=4,
                num_key_value_heads=2, num_experts=E)
    TINY = {
        "mixtral": ("MixtralBackbone", dict(intermediate_dim=64, top_k=K)),
        "qwen_moe": ("QwenMoeBackbone", dict(
            intermediate_dim=64, moe_intermediate_dim=48, shared_expert_intermediate_dim=40,
            top_k=K)),
        "qwen3_moe": ("Qwen3MoeBackbone", dict(
            intermediate_dim=64, moe_intermediate_dim=48, head_dim=8, top_k=K)),
        "qwen3_5_moe": ("Qwen3_5MoeBackbone", dict(
            head_dim=8, moe_intermediate_dim=48, shared_expert_intermediate_size=40,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
            linear_value_head_dim=8, layer_types=["full_attention"] * 2, top_k=K)),
        "gpt_oss": ("GptOssBackbone", dict(intermediate_dim=48, head_dim=8, top_k=K)),
        "gemma4": ("Gemma4Backbone", dict(
            image_size=None, intermediate_dim=64, head_dim=8, enable_moe_block=True,
            expert_intermediate_dim=48, num_experts_per_token=K, sliding_window_size=8)),
    }

    def read(model):
        return {
            "parameters": sum(math.prod(v.shape) for v in model.trainable_variables),
            "structure": structure(model),
            "experts": expert_structure(model),
        }

    out = {}
    with keras.StatelessScope(initialize_variables=False):
        for name, (backbone, config) in TINY.items():
            model = getattr(keras_hub.models, backbone)(**SIZE, **config)
            weights = [[v.path, list(v.shape)] for v in model.trainable_variables]
            out[name] = {**read(model), "weights": weights}
        for size in PUBLISHED_MOE_SIZES:
            out[size.name] = read(size.build())
    print("JSON" + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def read(tmp_path_factory):
    script = f"EXPERTS, TOP_K = {EXPERTS}, {TOP_K}\n" + SCRIPT
    return run_json_script(
        script, tmp_path_factory.mktemp("moe_cards"), without_tensorflow=True, timeout=600
    )


@pytest.mark.parametrize("family", BANKS)
def test_each_familys_card_counts_its_experts_as_its_built_weights_hold_them(read, family):
    weights = read[family]["weights"]
    total = sum(math.prod(shape) for _, shape in weights)
    routed = sum(math.prod(shape) for path, shape in weights if BANKS[family] in path)
    card = weights_card(read[family], family)
    assert (card.experts, card.top_k) == (EXPERTS, TOP_K)
    assert card.parameters == total
    assert card.expert_parameters == routed
    assert card.active_parameters == total - routed * (1 - TOP_K / EXPERTS)
    shared = [path for path, _ in weights if "shared_expert" in path]
    assert bool(shared) == (family in SHARED)  # dense beside the banks, so always active


@pytest.mark.parametrize("size", PUBLISHED_MOE_SIZES, ids=lambda size: size.name)
def test_the_card_of_a_released_model_holds_its_published_parameters(read, size):
    found = compare(size, weights_card(read[size.name], size.name))
    assert found.total_ratio == pytest.approx(1, rel=TOLERANCE)
    assert found.active_ratio == pytest.approx(1, rel=TOLERANCE)


def test_gpt_oss_published_active_parameters_leave_the_embedding_out(read):
    # OpenAI counts the unembedding as active and the embedding not: the card's own active
    # count, which holds both, is a tenth or more above theirs.
    for size in (GPT_OSS_120B, GPT_OSS_20B):
        card = weights_card(read[size.name], size.name)
        assert card.active_parameters / size.active > 1.1
