"""What the long-sequence options do to one device's training step on JAX, for keras-hub's
Llama 3 built tiny, with context 1, 2 and 4 and with recomputation none, selective and full, at
one global batch: the activations one device keeps from the forward for the backward, measured
(the arrays `jax.vjp` holds after the forward ran, on the first device), beside what the plan
search's card counts for the same plan; the compiled step's temporaries (XLA's memory analysis:
the kept activations and what else the step holds at its peak) and its FLOPs (XLA's cost
analysis). Nothing is timed, so the figures are the same on a busy machine.

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
        kept_activations,
        recompute_layers,
        step_temporaries,
    )

    hub.LONG_SEQUENCE = sequence
    os.environ["GPK_LONG_SEQUENCE"] = str(sequence)  # the card's counting child builds it so
    x, y = hub.long_tokens(batch)
    card = _card(hub, sequence, batch)
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
        kept = kept_activations(model, distribution, x, y)
        found.append(
            {
                "context": context,
                "checkpointing": checkpointing.value,
                "recomputed_layers": recomputed,
                "kept_mb": None if kept is None else kept / 1e6,
                "counted_mb": _counted(card, context, checkpointing.value, batch) / 1e6,
                "temporaries_mb": None if temporaries is None else temporaries / 1e6,
                "gflops_per_device": _flops(model, distribution, x, y) / 1e9,
            }
        )
    return found


def _card(hub: object, sequence: int, batch: int) -> object:
    """The plan search's card of the same model at this sequence, fp32 as the runs train."""
    import numpy as np

    import gpu_parallel_kit as gpk

    x, _ = hub.long_tokens(1)
    one = {name: array[0] for name, array in x.items()}
    cluster = gpk.GPUCluster("h100", nodes=1, per_node=DEVICES)
    found = gpk.search(
        model=hub.llama3_long, inputs=one, labels=np.int32(0), gpus=cluster,
        global_batch=batch, precision="fp32", attention="as-written", progress=False,
    )  # fmt: skip
    return found.card


def _counted(card: object, context: int, checkpointing: str, batch: int) -> float:
    """The activations the card counts on one device for one replica of the whole batch, its
    sequence over `context` devices."""
    from gpu_parallel_kit.analysis.cost_model.parallel_plan import Plan
    from gpu_parallel_kit.analysis.cost_model.parallel_plan_memory import memory

    plan = Plan(data=1, tensor=1, stages=1, sharding="none", micro_batch_size=batch,
                micro_batches=1, schedule="-", virtual_stages=1, checkpointing=checkpointing,
                attention="as-written", context=context)  # fmt: skip
    return memory(card, plan).activations


def _flops(model: object, distribution: object, x: object, y: object) -> float:
    from gpu_parallel_kit.worker.jax.sequence_split import compiled_step
    from gpu_parallel_kit.worker.jax.work_count import _cost

    return _cost(compiled_step(model, distribution, x, y))["flops"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequence", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=4, help="the global batch, every case")
    parser.add_argument("--json", help="write the rows here too")
    options = parser.parse_args()
    rows = measure(options.sequence, options.batch)
    print(f"keras-hub Llama 3 (tiny), sequence {options.sequence}, global batch {options.batch}")
    print(f"{'context':>7} {'checkpointing':>13} {'recomputed':>10} {'kept MB':>8} "
          f"{'counted MB':>10} {'temporaries MB':>14} {'GFLOP/device':>12}")  # fmt: skip
    for row in rows:
        print(
            f"{row['context']:>7} {row['checkpointing']:>13} {row['recomputed_layers']:>10} "
            f"{row['kept_mb']:>8.1f} {row['counted_mb']:>10.1f} {row['temporaries_mb']:>14.1f} "
            f"{row['gflops_per_device']:>12.2f}"
        )
    if options.json:
        Path(options.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
