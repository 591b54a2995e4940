"""`gpk.search` on a 70 B Llama-style model at 8,192 tokens on 8 nodes of 8 H100s.

    python benchmarks/search_llama70b.py [--nodes 8] [--batch 128]

Builds keras-hub's `Llama3Backbone` at Llama 3 70 B's shape (80 blocks of width 8,192, 64 heads,
8 KV heads, FFN 28,672, a 128,256-token vocabulary), counts one 8,192-token sample by depth,
ranks every plan on H100 nodes at the global batch, and prints the leading plans and why the best
wins; then the memory of tensor 8 × stages 4 × data 2 (1F1B, micro-batch 1, no recomputation)
with flash attention and as written, each without and with sequence parallelism.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gpu_parallel_kit as gpk
from gpu_parallel_kit.analysis.cost_model.parallel_plan import Plan
from gpu_parallel_kit.analysis.cost_model.parallel_plan_memory import memory


def llama70b():
    """Llama 3 70 B's shape as keras-hub's `Llama3Backbone` takes it."""
    import keras_hub

    return keras_hub.models.Llama3Backbone(
        vocabulary_size=128256, num_layers=80, num_query_heads=64, hidden_dim=8192,
        intermediate_dim=28672, num_key_value_heads=8,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--batch", type=int, default=128)
    options = parser.parse_args()
    sample = {"token_ids": np.zeros(8192, "int32"), "padding_mask": np.ones(8192, "int32")}
    cluster = gpk.GPUCluster("h100", nodes=options.nodes, per_node=8)
    start = time.perf_counter()
    plans = gpk.search(llama70b, sample, cluster, global_batch=options.batch, progress=False)
    print(f"searched in {time.perf_counter() - start:.1f} s")
    print(plans.text())
    data = cluster.gpus // 32
    for split_norms in (False, True):
        for attention in ("flash", "as-written"):
            used = Plan(data=data, tensor=8, stages=4, sharding="none", micro_batch_size=1,
                        micro_batches=options.batch // data, schedule="1f1b", virtual_stages=1,
                        checkpointing="none", attention=attention,
                        sequence_parallel=split_norms)  # fmt: skip
            total = memory(plans.card, used).total
            print(f"tensor 8 × stages 4 × data {data}, {attention}, sequence parallel "
                  f"{split_norms}: {total / 1e9:.1f} GB per GPU")  # fmt: skip


if __name__ == "__main__":
    main()
