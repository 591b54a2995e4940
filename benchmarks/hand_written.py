"""The data-parallel program a user writes by hand, after keras.io's distributed training guide.

A fresh interpreter makes N logical CPU devices, builds and compiles the model inside a
MirroredStrategy scope (ReductionToOneDevice, the cross-device ops the kit uses on CPU) and calls
`model.fit(x, y, batch_size=global_batch, epochs=E)` on NumPy arrays. The only additions are
instruments: a callback taking the same timestamps as the kit's StepTimer (not async-safe, so each
timestamp follows the end of its step, as in the kit), and phase timestamps written as JSON.

    python benchmarks/hand_written.py --devices 2 --batch 256 --epochs 4 \
        --x x.npy --y y.npy --out result.json
"""

from __future__ import annotations

import time

PROCESS_BEGIN = time.perf_counter()  # CLOCK_MONOTONIC: comparable with the parent's clock

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # as the kit's worker does, for quiet logs

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from workload import MODELS, build  # noqa: E402

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
    strategy = tf.distribute.MirroredStrategy(
        devices=[f"/cpu:{i}" for i in range(args.devices)],
        cross_device_ops=tf.distribute.ReductionToOneDevice(),
    )
    with strategy.scope():
        keras.utils.set_random_seed(args.seed)
        model = build(args.model, args.width, args.layers, args.steps_per_execution)
    x, y = np.load(args.x), np.load(args.y)
    ready = time.perf_counter()

    timer = _Timer()
    model.fit(
        x, y, batch_size=args.batch, epochs=args.epochs, callbacks=[timer], verbose=args.verbose
    )
    fitted = time.perf_counter()

    report = {
        "replicas": strategy.num_replicas_in_sync,
        "steps_per_execution": args.steps_per_execution,  # batch_ends: one per execution
        "samples": len(x),
        "global_batch": args.batch,
        "epochs": args.epochs,
        "process_begin": PROCESS_BEGIN,
        "import_s": IMPORTED - PROCESS_BEGIN,
        "startup_s": ready - PROCESS_BEGIN,  # interpreter start to ready-to-train
        "train_begin": timer.train_begin,
        "batch_ends": timer.batch_ends,
        "epoch_times_s": timer.epoch_times,
        "fit_return_s": fitted - timer.batch_ends[-1],  # last step's end to fit's return
        "loss": timer.losses,
        "end": time.perf_counter(),
    }
    with open(args.out, "w") as stream:
        json.dump(report, stream)
    return 0


class _Timer(keras.callbacks.Callback):
    """Step and epoch timestamps, taken where the kit's StepTimer takes them."""

    def __init__(self) -> None:
        super().__init__()
        self.train_begin = 0.0
        self.batch_ends: list[float] = []
        self.epoch_times: list[float] = []
        self.losses: list[float] = []
        self._epoch_begin = 0.0

    def on_train_begin(self, logs=None) -> None:
        self.train_begin = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self._epoch_begin = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.batch_ends.append(time.perf_counter())

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.epoch_times.append(time.perf_counter() - self._epoch_begin)
        self.losses.append(float((logs or {}).get("loss", float("nan"))))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--model", choices=MODELS, default="mlp", help="see workload.py")
    parser.add_argument("--batch", type=int, default=256, help="global batch")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--x", required=True, help=".npy file of inputs")
    parser.add_argument("--y", required=True, help=".npy file of labels")
    parser.add_argument("--out", required=True, help="where to write the JSON report")
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=1,
        help="compile's steps_per_execution (1: Keras's default, as in the guide)",
    )
    parser.add_argument("--verbose", type=int, default=0, help="fit's verbose (kit uses 0)")
    parser.add_argument(
        "--inter-op-threads",
        type=int,
        default=0,
        help="set TF inter-op threads (0: TensorFlow's default, as in the guide)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
