"""A mixture of experts' routing and expert banks, read off a model built without its weights,
for a plan search's card.

The experts and the router's top-k are what the model's config says (keras-hub's
`MixtralBackbone` and `Qwen3MoeBackbone` both name them `num_experts` and `top_k`; Qwen-MoE's
`num_experts_per_tok` is read too). The expert banks are found by shape, not by family: every
3-D weight whose leading dimension is the expert count, as keras-hub stacks its experts
(experts × width × FFN and experts × FFN × width), held in the same block as a router, a 2-D
(width, experts) kernel (so an attention output kernel of as many heads is no expert).

A model that cannot be built with its weights deferred (a builder that compiles it, say) is
read as having no experts.
"""

from __future__ import annotations

import math
import re
from typing import Any

from .quiet_start import native_stderr_filtered
from .work_count import answer

TOP_K_NAMES = ("top_k", "num_experts_per_tok")


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
    """The model's experts as a plan reads them: "experts", "top_k", "expert_parameters" (every
    bank's weights, all blocks) and "expert_outputs" (what one token's pass through one expert
    of every bank writes, in values); {} for a model without experts."""
    experts = top_k = None
    for layer in _every_layer(model):
        count = getattr(layer, "num_experts", None)
        k = next((getattr(layer, n) for n in TOP_K_NAMES if hasattr(layer, n)), None)
        if isinstance(count, int) and isinstance(k, int) and count > 1:
            experts, top_k = count, k
            break
    if experts is None:
        return {}
    weights = model.trainable_variables
    blocks = {_block(v.path) for v in weights if len(v.shape) == 2 and v.shape[1] == experts}
    kernels = [
        v
        for v in weights
        if len(v.shape) == 3 and v.shape[0] == experts and _block(v.path) in blocks
    ]
    if not kernels:
        return {}
    banks = [tuple(v.shape) for v in kernels]
    return {
        "experts": experts,
        "top_k": top_k,
        "expert_parameters": float(sum(math.prod(shape) for shape in banks)),
        # each stacked matmul writes its last dimension per token and expert
        "expert_outputs": float(sum(shape[-1] for shape in banks)),
        # the layers holding the banks, as a count's residuals name them (`layer_path`)
        "bank_paths": sorted({_bank_path(v.path) for v in kernels}),
    }


def _bank_path(path: str) -> str:
    """The layer holding a weight, each name without its index, as
    `jax/abstract_count.layer_path` names a residual's layer."""
    return "/".join(re.sub(r"_\d+$", "", p) for p in path.split("/")[:-1])


def _block(path: str) -> str:
    """The block holding a weight's layer: its path without the layer and the weight's name
    ("block/router/kernel" and "block/experts/up" → "block")."""
    return "/".join(path.split("/")[:-2])


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
