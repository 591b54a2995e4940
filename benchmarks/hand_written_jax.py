"""The data-parallel program a user writes by hand on JAX, after keras.io's distribution guide.

A fresh interpreter asks XLA for N host devices, selects Keras's JAX backend, sets
`keras.distribution.DataParallel` over every device with `keras.distribution.set_distribution`,
builds and compiles the model and calls `model.fit(x, y, batch_size=global_batch, epochs=E)` on
NumPy arrays; `--no-strategy`, the program a user writes for one device, sets no distribution.
The only additions are instruments, the same as `hand_written.py`'s: a callback
taking the kit's StepTimer's timestamps, and phase timestamps written as JSON in its format.

    python benchmarks/hand_written_jax.py --devices 2 --batch 256 --epochs 4 \
        --x x.npy --y y.npy --out result.json
"""

from __future__ import annotations

import time

PROCESS_BEGIN = time.perf_counter()  # CLOCK_MONOTONIC: comparable with the parent's clock

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    # The guide's first step: the devices and the backend, before JAX or Keras is imported.
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.devices}"
    ).strip()
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["KERAS_BACKEND"] = "jax"
    import keras
    import numpy as np
    from hand_common import fit_and_report
    from workload import build

    imported = time.perf_counter()
    distribution = None
    if not args.no_strategy:  # without it: the program a user writes for one device
        distribution = keras.distribution.DataParallel(devices=keras.distribution.list_devices())
        keras.distribution.set_distribution(distribution)
    keras.utils.set_random_seed(args.seed)
    model = build(args.model, args.width, args.layers, args.steps_per_execution)
    x, y = np.load(args.x), np.load(args.y)
    ready = time.perf_counter()

    replicas = distribution.device_mesh.devices.size if distribution else 1
    fit_and_report(
        model,
        x,
        y,
        args,
        replicas=replicas,
        process_begin=PROCESS_BEGIN,
        imported=imported,
        ready=ready,
    )
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    from hand_common import add_arguments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
