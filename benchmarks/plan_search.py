"""How fast every plan of GPT-3 175 B is sized and ranked on a cluster, once the step is counted.

    python benchmarks/plan_search.py [--nodes 192] [--per-node 8] [--batch 1536] [--rounds 5]
                                     [--sequence 2048]

Ranks every data × tensor × pipeline plan (`analysis/cost_model/parallel_plan_ranking.py`) of
the card `benchmarks/abstract_count.py` counted (174.6 B parameters, 2.2059e15 FLOPs per
sequence, 3,024 MiB of kept activations per block and sequence) on nodes of A100s with HDR
InfiniBand between them, and prints the plans' count, the median time of a ranking over the
rounds with its range, and the five fastest plans that fit. The budget the search aims at:
10,000 plans in 2 s, and 10⁵ in 5 s.

`--sequence` takes the card to longer sequences, its FLOPs and kept activations in proportion
(the attention's s² share is left out): from 8,192 tokens the context axis is offered, and the
plans multiply. `--nodes 1536 --batch 49152 --sequence 65536` gives 111,212 plans. At other
sequences the step times are the scaled card's, not a count of that model; the count of plans
and the time to rank them are what this measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from gpu_parallel_kit.analysis.cost_model.gpu_cluster import GPUCluster
from gpu_parallel_kit.analysis.cost_model.model_card import ModelCard
from gpu_parallel_kit.analysis.cost_model.parallel_plan_ranking import rank

GPT3 = ModelCard(
    parameters=174_615_846_912,
    layers=96,
    hidden=12_288,
    heads=96,
    sequence=2_048,
    flops_per_sample=2.2059e15,
    activation_bytes=3_024 * 2**20,
)
SHOWN = (
    "data",
    "tensor",
    "stages",
    "context",
    "sharding",
    "micro_batch_size",
    "schedule",
    "checkpointing",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=192)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1536)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sequence", type=int, default=GPT3.sequence)
    options = parser.parse_args()
    scale = options.sequence / GPT3.sequence
    card = dataclasses.replace(
        GPT3,
        sequence=options.sequence,
        flops_per_sample=GPT3.flops_per_sample * scale,
        activation_bytes=round(GPT3.activation_bytes * scale),
    )
    cluster = GPUCluster("a100", nodes=options.nodes, per_node=options.per_node, between="net200g")
    times = []
    for _ in range(options.rounds):
        start = time.perf_counter()
        rows = rank(card, cluster, options.batch)
        times.append(time.perf_counter() - start)
    fitting = [r for r in rows if r["fits"]]
    print(f"{cluster.label}, global batch {options.batch}, {options.sequence:,} tokens: "
          f"{len(rows):,} plans, "
          f"{len(fitting):,} fit")  # fmt: skip
    print(f"ranked in {statistics.median(times):.3f} s (median of {options.rounds}; "
          f"{min(times):.3f}-{max(times):.3f} s)")  # fmt: skip
    for row in fitting[:5]:
        plan = ", ".join(f"{k} {row[k]}" for k in SHOWN)
        print(f"  {row['step_time_s']:.2f} s, MFU {row['mfu']:.2f}, "
              f"{row['memory_bytes'] / 1e9:.1f} GB, {row['bound']}: {plan}")  # fmt: skip


if __name__ == "__main__":
    main()
