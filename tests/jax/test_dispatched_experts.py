"""The kit's dispatched experts against keras-hub's dense bank, in one fresh JAX interpreter.

A Mixtral, a Qwen3-MoE, a gpt-oss (biases, a clamped activation) and a Gemma 4 (per-expert scales,
a bank that sums its experts itself) block's bank (4 experts, top 2) computes 256 tokens on 4 host
devices (expert axis 4), each expert through the bank's own call: dispatched with room for every
token, its outputs weighted by the router equal the dense bank's; with capacity factor 1.0 it
drops tokens and says how many. XLA's own
count of the compiled calls' FLOPs gives the saving: the dispatched call costs top-k ÷ experts
of the dense bank's, within 5 %.
"""

from __future__ import annotations

import pytest

from .json_child import run_json_script

pytestmark = pytest.mark.slow

SCRIPT = r"""
import os, json
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp, keras, numpy as np
from jax.sharding import Mesh
from keras_hub.src.models.mixtral.mixtral_decoder import MixtralMoeExperts
from keras_hub.src.models.qwen3_moe.qwen3_moe_decoder import Qwen3MoeExperts
from keras_hub.src.models.gpt_oss.gpt_oss_decoder import GptOssExperts
from keras_hub.src.models.gemma4.gemma4_moe import Gemma4MoEBlock
from gpu_parallel_kit.worker.jax.dispatched_experts import DispatchedExperts

TOKENS, WIDTH, FFN, EXPERTS, TOP_K = 256, 32, 64, 4, 2
keras.utils.set_random_seed(0)
mesh = Mesh(np.asarray(jax.devices()).reshape(1, 4), ("batch", "model"))
alone = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("batch", "model"))
x = np.random.default_rng(0).normal(size=(TOKENS, WIDTH)).astype("float32")
logits = np.random.default_rng(1).normal(size=(TOKENS, EXPERTS)).astype("float32")
probabilities = jax.nn.softmax(logits)
top_p, top_i = jax.lax.top_k(probabilities, TOP_K)
top_p = top_p / top_p.sum(-1, keepdims=True)
routing = (jax.nn.one_hot(top_i, EXPERTS) * top_p[..., None]).sum(1).T  # (experts, tokens)

def flops(function, *arguments):
    return jax.jit(function).lower(*arguments).compile().cost_analysis()["flops"]

answers = {}
BANKS = (
    ("mixtral", MixtralMoeExperts),
    ("qwen3_moe", Qwen3MoeExperts),
    ("gpt_oss", GptOssExperts),
    ("gemma4", Gemma4MoEBlock),
)
for name, kind in BANKS:
    bank = kind(EXPERTS, WIDTH, FFN)
    bank.build((TOKENS, WIDTH))
    for seed, weight in enumerate(bank.weights):  # an unseeded initializer repeats itself
        weight.assign(np.random.default_rng(seed + 2).normal(size=weight.shape) * 0.1)
    combines = name == "gemma4"  # its call takes the routing weights and sums itself
    dense = bank(x, routing.T) if combines else (bank(x) * routing[:, :, None]).sum(0)
    answer = {}
    for factor in (2.0, 1.0):
        layer = DispatchedExperts(bank, mesh, factor)
        layer.tally = []
        out = (layer(x, top_i) * top_p[..., None]).sum(1)
        answer[str(factor)] = {
            "difference": float(jnp.abs(out - dense).max()),
            "dropped": layer.tally[0][0],
            "routed": layer.tally[0][1],
        }
    values = [w.value for w in bank.weights]
    handed = (routing.T,) if combines else ()
    dense_flops = flops(lambda x, *w: bank.stateless_call(w, [], x, *handed)[0], x, *values)
    # XLA counts one device's program: the dispatched call counted whole on a one-device mesh
    layer = DispatchedExperts(bank, alone, 1.0)

    def dispatched(x, i, p, *w):  # the weights as arguments, as in a training step
        with keras.StatelessScope(state_mapping=list(zip(bank.weights, w))):
            return (layer(x, i) * p[..., None]).sum(1)

    dispatched_flops = flops(dispatched, x, top_i, top_p, *values)
    answer.update(dense_flops=dense_flops, dispatched_flops=dispatched_flops)
    answers[name] = answer
print("JSON" + json.dumps(answers))
"""


BANKS = ["mixtral", "qwen3_moe", "gpt_oss", "gemma4"]


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    return run_json_script(SCRIPT, tmp_path_factory.mktemp("dispatched"), timeout=300)


@pytest.mark.parametrize("name", BANKS)
def test_dispatched_experts_equal_the_dense_bank_when_nothing_is_dropped(answers, name):
    roomy = answers[name]["2.0"]
    assert roomy["dropped"] == 0 and roomy["routed"] == 256 * 2
    assert roomy["difference"] <= 1e-5


@pytest.mark.parametrize("name", BANKS)
def test_a_full_expert_drops_tokens_and_counts_them(answers, name):
    tight = answers[name]["1.0"]
    assert 0 < tight["dropped"] < tight["routed"]
    assert tight["difference"] > 1e-3  # a dropped token's expert output is missing


@pytest.mark.parametrize("name", BANKS)
def test_a_dispatched_call_costs_top_k_over_experts_of_the_dense_bank(answers, name):
    counted = answers[name]
    ratio = counted["dispatched_flops"] / counted["dense_flops"]
    assert ratio == pytest.approx(2 / 4, rel=0.05)
