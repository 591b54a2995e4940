"""What both hand-written programs share: their options and the callback that takes their
timestamps. Imports neither Keras nor a backend when imported, so each program picks its backend
first."""

from __future__ import annotations

import argparse
import time
from typing import Any

from workload import MODELS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options both programs take (`overhead.py` passes the same to either)."""
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
        help="compile's steps_per_execution (1: Keras's default, as in the guides)",
    )
    parser.add_argument(
        "--no-strategy",
        action="store_true",
        help="one device and no strategy or distribution at all: plain fit (needs --devices 1)",
    )
    parser.add_argument("--verbose", type=int, default=0, help="fit's verbose (kit uses 0)")
    parser.add_argument(
        "--inter-op-threads",
        type=int,
        default=0,
        help="set TF inter-op threads (0: TensorFlow's default, as in the guide; TensorFlow only)",
    )


def make_timer() -> Any:
    """A Keras callback taking timestamps where the kit's StepTimer takes them; Keras is
    imported now, on the backend the program chose."""
    import keras

    class Timer(keras.callbacks.Callback):
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

    return Timer()


def fit_and_report(model: Any, x: Any, y: Any, args: argparse.Namespace, **marks: Any) -> None:
    """Fit as the guides do, timed by `make_timer`'s callback, and write the JSON both programs
    write to `args.out`. `marks`: replicas, process_begin, imported and ready."""
    import json

    timer = make_timer()
    model.fit(
        x, y, batch_size=args.batch, epochs=args.epochs, callbacks=[timer], verbose=args.verbose
    )
    fitted = time.perf_counter()
    report = {
        "replicas": marks["replicas"],
        "steps_per_execution": args.steps_per_execution,  # batch_ends: one per execution
        "samples": len(x),
        "global_batch": args.batch,
        "epochs": args.epochs,
        "process_begin": marks["process_begin"],
        "import_s": marks["imported"] - marks["process_begin"],
        "startup_s": marks["ready"] - marks["process_begin"],  # interpreter start to ready
        "train_begin": timer.train_begin,
        "batch_ends": timer.batch_ends,
        "epoch_times_s": timer.epoch_times,
        "fit_return_s": fitted - timer.batch_ends[-1],  # last step's end to return
        "loss": timer.losses,
        "end": time.perf_counter(),
    }
    with open(args.out, "w") as stream:
        json.dump(report, stream)
