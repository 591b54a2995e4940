"""The data-parallel program a user writes by hand, after keras.io's distributed training guide.

A fresh interpreter makes N logical CPU devices, builds and compiles the model inside a
MirroredStrategy scope (ReductionToOneDevice, the cross-device ops the kit uses on CPU) and calls
`model.fit(x, y, batch_size=global_batch, epochs=E)` on NumPy arrays; `--no-strategy`, the
program a user writes for one device, builds and fits with no tf.distribute strategy at all.
The only additions are instruments: a callback taking the same timestamps as the kit's StepTimer
(not async-safe, so each timestamp follows the end of its step, as in the kit), and phase
timestamps written as JSON.

    python benchmarks/hand_written.py --devices 2 --batch 256 --epochs 4 \
        --x x.npy --y y.npy --out result.json
"""

from __future__ import annotations

import time

PROCESS_BEGIN = time.perf_counter()  # CLOCK_MONOTONIC: comparable with the parent's clock

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # as the kit's worker does, for quiet logs

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from hand_common import add_arguments, fit_and_report  # noqa: E402
from workload import build  # noqa: E402

IMPORTED = time.perf_counter()


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)

    # The guide's first step: the devices, before anything starts the runtime.
    cpu = tf.config.list_physical_devices("CPU")[0]
    if args.devices > 1:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(args.devices)]
        )
    if args.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    if args.no_strategy:  # the program a user writes for one device: no tf.distribute
        strategy = tf.distribute.get_strategy()
    else:
        strategy = tf.distribute.MirroredStrategy(
            devices=[f"/cpu:{i}" for i in range(args.devices)],
            cross_device_ops=tf.distribute.ReductionToOneDevice(),
        )
    with strategy.scope():
        keras.utils.set_random_seed(args.seed)
        model = build(args.model, args.width, args.layers, args.steps_per_execution)
    x, y = np.load(args.x), np.load(args.y)
    ready = time.perf_counter()

    fit_and_report(
        model,
        x,
        y,
        args,
        replicas=strategy.num_replicas_in_sync,
        process_begin=PROCESS_BEGIN,
        imported=IMPORTED,
        ready=ready,
    )
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.no_strategy and args.devices != 1:
        parser.error("--no-strategy trains on one device: give --devices 1")
    return args


if __name__ == "__main__":
    sys.exit(main())
