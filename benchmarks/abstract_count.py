"""GPT-3 175 B's training step counted without allocating its weights (about 700 GB in float32).

    KERAS_BACKEND=jax /usr/bin/time -v python benchmarks/abstract_count.py [--layers 96]

Builds keras-hub's `GPT2Backbone` at GPT-3's published size (96 layers, width 12,288, 96 heads,
a 4x intermediate width, sequence 2,048, vocabulary 51,200) under a deferring scope, lowers and
compiles Keras's train step with Adam at one sequence per micro-batch and 16-bit activations,
and prints FLOPs per step against Megatron-LM's closed form, the parameters, the activations
kept per layer against Korthikanti et al.'s s·b·h·(34 + 5·a·s/h), the wall time and the peak
memory of the process. The backbone has no language-model head, so the formula's V term is left
out. TensorFlow is kept out of the process (keras-hub would import it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def peak_memory_bytes() -> int:
    """This process's peak resident memory so far (Linux counts kilobytes)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=96)
    parser.add_argument("--hidden", type=int, default=12288)
    parser.add_argument("--heads", type=int, default=96)
    parser.add_argument("--sequence", type=int, default=2048)
    parser.add_argument("--vocabulary", type=int, default=51200)
    parser.add_argument("--batch", type=int, default=1, help="sequences per micro-batch")
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--json", help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    sys.meta_path.insert(0, _NoTensorFlow())
    os.environ["KERAS_BACKEND"] = "jax"
    started = time.perf_counter()
    from gpu_parallel_kit.worker.jax.abstract_count import count_abstract

    L, h, a, s, V, b = (
        args.layers,
        args.hidden,
        args.heads,
        args.sequence,
        args.vocabulary,
        args.batch,
    )

    def build():
        import keras_hub

        return keras_hub.models.GPT2Backbone(
            vocabulary_size=V,
            num_layers=L,
            num_heads=a,
            hidden_dim=h,
            intermediate_dim=4 * h,
            max_sequence_length=s,
            dropout=0.1,
        )

    inputs = {"token_ids": ((s,), "int32"), "padding_mask": ((s,), "int32")}
    count = count_abstract(build, inputs, b, precision=args.precision)
    wall = time.perf_counter() - started
    kept = count["activations"]
    blocks = {k: v for k, v in kept["by_layer"].items() if k.startswith("transformer_layer_")}
    per_layer = sum(blocks.values()) / max(len(blocks), 1)
    megatron = 72 * b * s * L * h * h * (1 + s / (6 * h))
    korthikanti = s * b * h * (34 + 5 * a * s / h)
    print(f"GPT {L} layers, width {h}, {a} heads, sequence {s}, batch {b}, {args.precision}")
    print(f"parameters        {count['parameters']:,}")
    print(f"FLOPs per step    {count['flops']:.4e} (optimizer {count['optimizer']})")
    print(
        f"  Megatron 72·B·s·L·h²·(1 + s/6h)  {megatron:.4e}  ratio {count['flops'] / megatron:.4f}"
    )
    print(f"bytes accessed    {count['bytes']:.4e}")
    total, saved = kept["kept_bytes"] / 2**30, kept["saved_bytes"] / 2**30
    print(f"activations kept  {total:.2f} GiB ({saved:.2f} GiB saved before recomputing)")
    ratio = per_layer / korthikanti
    print(
        f"  per layer       {per_layer / 2**20:.1f} MiB; Korthikanti {korthikanti / 2**20:.1f} MiB"
    )
    print(f"  ratio           {ratio:.3f} (s·b·h·(34 + 5as/h))")
    print("  per layer by kind (MiB):")
    for kind, size in kept["by_kind"].items():
        print(f"    {kind:45s} {size / max(len(blocks), 1) / 2**20:10.1f}")
    print(f"attention         {count['attention']}")
    print(f"lower {count['lower_s']:.1f} s, compile {count['compile_s']:.1f} s, wall {wall:.1f} s")
    print(f"peak memory       {peak_memory_bytes() / 2**30:.2f} GiB")
    if args.json:
        figures = {k: v for k, v in count.items() if k != "activations"}
        figures["activations"] = {k: v for k, v in kept.items() if k != "residuals"}
        figures.update(wall_s=wall, peak_bytes=peak_memory_bytes(), per_layer_bytes=per_layer)
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
