"""`gpk.search` end to end on GPT-3 175 B and 1,536 A100s: its time and memory on this machine.

    python benchmarks/search_gpt3.py [--nodes 192] [--per-node 8] [--batch 1536] [--rounds 2]

Builds keras-hub's `GPT2Backbone` at GPT-3 175 B's published shape (96 blocks of width 12,288,
96 heads, 2,048 tokens, a 50,257-token head) as a user would, and searches it on 192 nodes of 8
A100s (NVLink 3 inside, HDR InfiniBand between) at a global batch of 1,536. Each round starts
from an empty count cache, so it counts the step (by depth: a keras-hub backbone is counted at
one and two blocks, its weights never allocated), ranks every plan and replays the leading
pipelines. Prints each round's wall time, the plans and the best, and the peak resident memory
of this process and of all its processes together (the count runs in a child of the kit's JAX
server).
The budget: under 3 minutes within 8 GiB.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
import time

import numpy as np
import psutil

import gpu_parallel_kit as gpk
from gpu_parallel_kit.planning import step_count


def gpt3():
    """GPT-3 175 B: keras-hub's GPT-2 backbone at Brown et al.'s (2020) largest shape."""
    import keras
    import keras_hub

    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size=50257, num_layers=96, num_heads=96, hidden_dim=12288,
        intermediate_dim=4 * 12288, max_sequence_length=2048,
    )  # fmt: skip
    inputs = {
        name: keras.Input((2048,), dtype="int32", name=name)
        for name in ("token_ids", "padding_mask")
    }
    logits = keras.layers.Dense(50257, name="next_token")(backbone(inputs))
    return keras.Model(inputs, logits)


class PeakMemory:
    """The largest resident memory of this process and of all its descendants together, sampled
    every 0.1 s on a thread (the count runs in a grandchild, which `getrusage` cannot see)."""

    def __init__(self) -> None:
        self.own = self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.1):
            total = own = me.memory_info().rss
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
            self.own, self.total = max(self.own, own), max(self.total, total)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=192)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1536)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    cluster = gpk.GPUCluster(
        "a100", nodes=options.nodes, per_node=options.per_node, inside="nvlink3",
        between="net200g",
    )  # fmt: skip
    sample = {"token_ids": np.zeros(2048, "int32"), "padding_mask": np.ones(2048, "int32")}
    times = []
    peak = PeakMemory()
    for _ in range(options.rounds):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["GPK_CACHE_DIR"] = cache
            step_count._counted.clear()  # nor the count this process kept from the last round
            start = time.perf_counter()
            plans = gpk.search(gpt3, sample, cluster, global_batch=options.batch, progress=False)
            times.append(time.perf_counter() - start)
    peak.stop()
    fitting = int(plans.table["fits"].sum())
    print(f"{cluster.label}, global batch {options.batch}: {len(plans.table):,} plans, "
          f"{fitting:,} fit")  # fmt: skip
    print(f"search with a fresh count: {statistics.median(times):.1f} s (median of "
          f"{len(times)}; {min(times):.1f}-{max(times):.1f} s)")  # fmt: skip
    print(f"peak resident memory: this process {peak.own / 2**30:.2f} GiB, with every child "
          f"and server {peak.total / 2**30:.2f} GiB")  # fmt: skip
    print(f"best: {plans.best}")
    print(plans.explain())
    print(plans.note)


if __name__ == "__main__":
    main()
