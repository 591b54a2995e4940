"""What the long-sequence options do to one device's compiled training step on JAX: its
temporaries (the activations kept for the backward and what else the step holds at its peak,
from XLA's memory analysis) and its FLOPs (XLA's cost analysis), for keras-hub's Llama 3 built
tiny, with context 1, 2 and 4 and with recomputation none, selective and full, at one global
batch. A compile-time reading: nothing is timed, so the figures are the same on a busy machine.

    python benchmarks/long_sequences.py                  # sequence 1024, global batch 4
    python benchmarks/long_sequences.py --sequence 2048 --json long.json

The runs' own rows carry the same reading (`extra["sequence_split"]["step_temporaries_bytes"]`);
here every case is compiled in one process, so they compare at one global batch.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

DEVICES = 4


def measure(sequence: int, batch: int) -> list[dict[str, object]]:
    """Each case's temporaries and FLOPs on one device."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={DEVICES}"
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import jax
    import keras

    import tests.hub_models as hub
    from gpu_parallel_kit.strategies.long_sequences import Checkpointing, SequenceSplit
    from gpu_parallel_kit.worker.jax.sequence_split import (
        ContextParallel,
        add_activation_layouts,
        device_mesh,
        recompute_layers,
        step_temporaries,
    )

    hub.LONG_SEQUENCE = sequence
    x, y = hub.long_tokens(batch)
    found = []
    cases = [(c, Checkpointing.NONE) for c in (1, 2, 4)]
    cases += [(1, c) for c in (Checkpointing.SELECTIVE, Checkpointing.FULL)]
    for context, checkpointing in cases:
        split = SequenceSplit(context, False, checkpointing)
        keras.backend.clear_session()
        mesh = device_mesh(jax.devices()[:context], context, 1, context)
        mapping = keras.distribution.LayoutMap(mesh)
        add_activation_layouts(mapping, hub.llama3_long(), split)
        keras.backend.clear_session()
        distribution = ContextParallel(
            context=context, layout_map=mapping, batch_dim_name="batch", auto_shard_dataset=False
        )
        with distribution.scope():
            model = hub.llama3_long()
        recomputed = recompute_layers(model, split)
        model.optimizer.build(model.trainable_variables)
        temporaries = step_temporaries(model, distribution, x, y)
        found.append(
            {
                "context": context,
                "checkpointing": checkpointing.value,
                "recomputed_layers": recomputed,
                "temporaries_mb": None if temporaries is None else temporaries / 1e6,
                "gflops_per_device": _flops(model, distribution, x, y) / 1e9,
            }
        )
    return found


def _flops(model: object, distribution: object, x: object, y: object) -> float:
    import jax
    import keras

    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )
    batch = keras.tree.map_structure(
        lambda a: jax.device_put(a, distribution.get_data_layout(a.shape).backend_layout), (x, y)
    )
    with distribution.scope():
        compiled = jax.jit(model.train_step).lower(state, batch).compile()
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list | tuple) else analysis
    return float(analysis.get("flops", 0.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequence", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=4, help="the global batch, every case")
    parser.add_argument("--json", help="write the rows here too")
    options = parser.parse_args()
    rows = measure(options.sequence, options.batch)
    print(f"keras-hub Llama 3 (tiny), sequence {options.sequence}, global batch {options.batch}")
    print(f"{'context':>7} {'checkpointing':>13} {'recomputed':>10} {'temporaries MB':>14} "
          f"{'GFLOP/device':>12}")  # fmt: skip
    for row in rows:
        print(
            f"{row['context']:>7} {row['checkpointing']:>13} {row['recomputed_layers']:>10} "
            f"{row['temporaries_mb']:>14.1f} {row['gflops_per_device']:>12.2f}"
        )
    if options.json:
        Path(options.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
