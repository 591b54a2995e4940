"""The plan search's card of released mixtures of experts against their published parameters.

    python benchmarks/moe_active_parameters.py [--search]

Builds keras-hub's backbone at Qwen1.5-MoE-A2.7B's, gpt-oss-120b's and gpt-oss-20b's published
shapes with their weights deferred (`keras.StatelessScope`, nothing allocated), reads what the
plan search's count reads of the weights (the parameters, the structure, the experts) and
prints each card's total and active parameters against the published figures, as the table in
docs/published-runs.md ("Active parameters of released mixtures of experts") shows them. About
10 s on two cores; `tests/planning/test_moe_cards.py` holds the ratios. `--search` takes the
card `gpk.search` counts instead (one 128-token sample's step, by depth, in its children: about
a minute a model), whose parameters are the same.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")

from gpu_parallel_kit.planning.published_moe_sizes import (  # noqa: E402
    PUBLISHED_MOE_SIZES,
    compare,
    markdown,
    weights_card,
)


def weights_count(model: Any) -> dict[str, Any]:
    """What the search's count reads of a model's weights, its step not traced."""
    from gpu_parallel_kit.worker.expert_banks import expert_structure
    from gpu_parallel_kit.worker.jax.plan_count import structure

    return {
        "parameters": sum(math.prod(v.shape) for v in model.trainable_variables),
        "structure": structure(model),
        "experts": expert_structure(model),
    }


def searched_card(size: Any, tokens: int = 128) -> Any:
    """The card `gpk.search` counts of the released model, one `tokens`-token sample."""
    import numpy as np

    import gpu_parallel_kit as gpk

    sample = {"token_ids": np.zeros(tokens, "int32"), "padding_mask": np.ones(tokens, "int32")}
    cluster = gpk.GPUCluster("h100", nodes=1, per_node=8)
    return gpk.search(size.build, sample, cluster, global_batch=8, progress=False).card


def main() -> None:
    import keras

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--search", action="store_true", help="the card gpk.search counts")
    options = parser.parse_args()
    comparisons = []
    for size in PUBLISHED_MOE_SIZES:
        start = time.perf_counter()
        if options.search:
            card = searched_card(size)
        else:
            with keras.StatelessScope(initialize_variables=False):
                card = weights_card(weights_count(size.build()), size.name)
        found = compare(size, card)
        comparisons.append(found)
        print(
            f"{size.name}: {'counted' if options.search else 'read'} in "
            f"{time.perf_counter() - start:.1f} s; "
            f"{card.parameters:,.0f} parameters, {card.expert_parameters:,.0f} in "
            f"{card.experts} experts (top-{card.top_k}), {card.active_parameters:,.0f} active "
            f"with the embedding, {found.active:,.0f} as the source counts them"
        )
    print(markdown(comparisons))


if __name__ == "__main__":
    main()
