"""A mixture of experts' routing and expert banks, read off a model built without its weights,
for a plan search's card.

The banks are the ones expert parallelism splits (`sharding/experts.find_banks`, by shape: one
layer's per-expert weights, leading dimension E, beside a (width, E) router), so the search
counts the weights the expert axis divides. All keras-hub 0.32 families are found: Mixtral,
Qwen-MoE, Qwen3-MoE, Qwen3.5-MoE, gpt-oss (its router in a layer of its own, its experts'
biases beside their kernels) and Gemma 4 (its router beside the bank in the decoder block, a
scale per expert). A shared expert (Qwen-MoE, Qwen3.5-MoE) is dense, not in any bank: every
token goes through it. The top-k is what the config says: `top_k`, `num_experts_per_tok` or
`num_experts_per_token` (Gemma 4).

A model that cannot be built with its weights deferred (a builder that compiles it, say) is
read as having no experts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from ..sharding.experts import ExpertBank, find_banks
from .quiet_start import native_stderr_filtered
from .work_count import answer

TOP_K_NAMES = ("top_k", "num_experts_per_tok", "num_experts_per_token")


def read_experts(source: Any, sender: Any) -> None:
    """The child's entry: send (True, `expert_structure` of the model) or (False, one
    sentence)."""

    def read() -> dict[str, Any]:
        import keras

        from .compiling import load_model

        # keras-hub imports TensorFlow: its start-up chatter stays out of the notebook's stderr.
        with native_stderr_filtered():
            try:
                with keras.StatelessScope(initialize_variables=False):
                    return expert_structure(load_model(source))
            except Exception:  # noqa: BLE001 - as plan_count's count by depth: counted as dense
                return {}

    answer(sender, read)


def expert_structure(model: Any) -> dict[str, Any]:
    """The model's experts as a plan reads them (`expert_figures`); {} for a model without
    experts, or whose config says no top-k."""
    from .layers import read_weights

    banks = find_banks(read_weights(model))
    if not banks:
        return {}
    top_k = _top_k(model, banks[0].experts)
    return {} if top_k is None else expert_figures(banks, top_k)


def expert_figures(banks: Sequence[ExpertBank], top_k: int) -> dict[str, Any]:
    """What the card takes of a model's expert banks (`analysis/cost_model/model_card.py`,
    `routed_experts`).

    Args:
        banks: every block's bank, as `sharding/experts.find_banks` finds them.
        top_k: the experts each token is routed to.

    Returns:
        A dict: "experts" and "top_k"; "expert_parameters", every bank's per-expert weights in
        all blocks (kernels, biases and scales: what a token skips in the experts it is not
        routed to); "expert_outputs", what one token's pass through one expert of every bank
        writes, in values; "bank_paths", the layers holding the banks, as a count's residuals
        name them (`jax/abstract_count.layer_path`).
    """
    weights = [v for bank in banks for v in bank.variables]
    return {
        "experts": banks[0].experts,
        "top_k": top_k,
        "expert_parameters": float(sum(math.prod(v.shape) for v in weights)),
        # each stacked matmul writes its last dimension per token and expert
        "expert_outputs": float(sum(v.shape[-1] for v in weights if len(v.shape) == 3)),
        "bank_paths": sorted({_bank_path(v.path) for v in weights}),
    }


def _top_k(model: Any, experts: int) -> int | None:
    """The top-k the config says beside its experts: on the backbone, a block or a router."""
    for layer in _every_layer(model):
        k = layer_top_k(layer)
        if getattr(layer, "num_experts", None) == experts and k is not None:
            return k
    return None


def layer_top_k(layer: Any) -> int | None:
    """The experts per token a layer names (`TOP_K_NAMES`, the first that is a whole number),
    or None; the plan's count and dispatched experts read it alike."""
    for name in TOP_K_NAMES:
        value = getattr(layer, name, None)
        if isinstance(value, int):
            return value
    return None


def _bank_path(path: str) -> str:
    """The layer holding a weight, each name without its index, as
    `jax/abstract_count.layer_path` names a residual's layer."""
    return "/".join(re.sub(r"_\d+$", "", p) for p in path.split("/")[:-1])


def _every_layer(model: Any) -> list[Any]:
    """The model and the layers its models list, depth first (`Model.layers`, public: a
    keras-hub backbone says its experts itself, and so does each of its blocks)."""
    found, stack, seen = [], [model], set()
    while stack:
        layer = stack.pop(0)
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        found.append(layer)
        stack[:0] = list(getattr(layer, "layers", None) or [])
    return found
