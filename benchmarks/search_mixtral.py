"""`gpk.search` on a Mixtral-8×7B-sized mixture of experts at 4,096 tokens on 8 nodes of 8 H100s.

    python benchmarks/search_mixtral.py [--nodes 8] [--batch 256] [--sequence 4096] [--store]

Builds keras-hub's `MixtralBackbone` at Mixtral 8×7B's shape (32 blocks of width 4,096, 32 heads,
8 KV heads, FFN 14,336, 8 experts, top-2, a 32,000-token vocabulary), counts one sample by depth,
and prints the count's FLOPs per token against 6 × the active parameters, the leading plans and
why the best wins; then Megatron-Core's published Mixtral 8×7B run projected on the same card
(docs/published-runs.md, "A mixture of experts"); `--store` keeps the card in
`gpu_parallel_kit/planning/published_moe_cards.json`, which
`tests/planning/test_published_moe_run.py` projects.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gpu_parallel_kit as gpk
from gpu_parallel_kit.planning.published_moe_run import MIXTRAL_8X7B, project_moe, store_card


def mixtral():
    """Mixtral 8×7B's shape as keras-hub's `MixtralBackbone` takes it."""
    import keras_hub

    return keras_hub.models.MixtralBackbone(
        vocabulary_size=32000, num_layers=32, num_query_heads=32, hidden_dim=4096,
        intermediate_dim=14336, num_key_value_heads=8, num_experts=8, top_k=2,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--sequence", type=int, default=4096)
    parser.add_argument("--store", action="store_true", help="keep the card for the tests")
    options = parser.parse_args()
    tokens = options.sequence
    sample = {"token_ids": np.zeros(tokens, "int32"), "padding_mask": np.ones(tokens, "int32")}
    cluster = gpk.GPUCluster("h100", nodes=options.nodes, per_node=8)
    start = time.perf_counter()
    plans = gpk.search(mixtral, sample, cluster, global_batch=options.batch, progress=False)
    print(f"searched in {time.perf_counter() - start:.1f} s")
    card = plans.card
    per_token = card.flops_per_sample / tokens
    six_n = 6 * card.active_parameters
    print(
        f"{card.parameters / 1e9:.2f} B parameters, {card.active_parameters / 1e9:.2f} B active "
        f"({card.experts} experts, top-{card.top_k}); counted {per_token / 1e9:.1f} GFLOPs a "
        f"token against 6 × active = {six_n / 1e9:.1f} G ({per_token / six_n:.3f}×)"
    )
    print(plans.text())
    if (options.nodes, options.batch, tokens) == (8, 256, 4096):
        projected = project_moe(MIXTRAL_8X7B, card)
        print(
            f"Megatron-Core's published plan (TP 1, EP 8, PP 4, VP 8, micro-batch 1 × 16): "
            f"{projected['step_time_s']:.2f} s, {projected['tflops_per_gpu']:.0f} TFLOP/s per "
            f"GPU projected against {MIXTRAL_8X7B.tflops_per_gpu:.0f} published "
            f"({projected['ratio']:.2f}×), {projected['memory_bytes'] / 1e9:.1f} GB per GPU counted"
        )
        if options.store:
            store_card(card, MIXTRAL_8X7B, plans.note)


if __name__ == "__main__":
    main()
