"""What the gradient all-reduce of a data-parallel step costs, measured in the run's own worker.

Traced before the first timed step, beside the run's set-up, and timed after training on one
real batch: the *exposed* communication (the per-replica step with and without the all-reduce,
alternated in blocks so drift hits both; on one device the reduction is a no-op, the control
that shows the noise floor) and the *standalone* all-reduce on gradient-shaped tensors. On
virtual devices these are runtime overhead on shared cores, not a network's cost. No update is
applied. See `docs/strategies/data.md`, "What it measures".
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import keras
import tensorflow as tf

from ...measuring.stats import COMM_BLOCKS, COMM_STEPS_PER_BLOCK, Timing, communication_figures


def measure_all_reduce(
    strategy: tf.distribute.Strategy, model: keras.Model, batch: Any
) -> dict[str, float]:
    """Both figures now, traced and timed in one go."""
    return prepared_all_reduce(strategy, model, batch)()


def prepared_all_reduce(strategy: tf.distribute.Strategy, model: keras.Model, batch: Any) -> Timing:
    """The measurement traced and run once now; calling the result times it on the model's
    weights as they are then (the traced functions read the variables, not copies)."""
    variables = model.trainable_variables

    def replica_gradients(x, y):
        with tf.GradientTape() as tape:
            predictions = model(x, training=False)
            loss = model.compute_loss(x=x, y=y, y_pred=predictions, training=False)
        # A variable the loss does not reach (an untied output embedding) has no gradient, and
        # training's all-reduce skips it too.
        return [g for g in tape.gradient(loss, variables) if g is not None]

    @tf.function(autograph=False)
    def without_reduce(data):
        return strategy.run(replica_gradients, args=data)

    @tf.function(autograph=False)
    def reduce_only(gradients):
        return strategy.extended.batch_reduce_to(
            tf.distribute.ReduceOp.SUM, [(g, destination(g, strategy)) for g in gradients]
        )

    # Both functions already traced are called, not traced again: the model is traced once
    # (0.1-0.3 s saved), and TensorFlow inlines nested functions, so the step is one graph.
    @tf.function(autograph=False)
    def with_reduce(data):
        return reduce_only(without_reduce(data))

    gradients = without_reduce(batch)  # traces; also the tensors the standalone reduce sums
    reduce_only(gradients)
    with_reduce(batch)

    def timed() -> dict[str, float]:
        plain, reduced = [], []
        for _ in range(COMM_BLOCKS):
            plain.append(_per_call(without_reduce, batch))
            reduced.append(_per_call(with_reduce, batch))
        standalone = statistics.median(
            _per_call(reduce_only, gradients) for _ in range(COMM_BLOCKS)
        )
        return communication_figures(plain, reduced, standalone)

    return timed


def not_measured(
    extra: dict[str, Any], gradient_bytes: int, why: str = "measure_comm=False"
) -> dict[str, Any]:
    """RunResult fields of a run that skipped the measurement (measure_comm=False) or whose
    measurement failed: no figure, and words saying why, so a table never reads it as zero
    communication."""
    extra.update(comm_measured=False, comm_method=f"not measured ({why})")
    return {"comm_time_s": None, "comm_share": None, "comm_bytes": gradient_bytes}


def destination(value: Any, strategy: tf.distribute.Strategy) -> Any:
    """Reduce onto the devices a value already lives on: each replica gets the sum. A single
    replica's value is a plain tensor; its one device is named instead."""
    if isinstance(value, tf.distribute.DistributedValues):
        return value
    try:
        return strategy.extended.worker_devices[0]
    except RuntimeError:  # the default strategy (the baseline trains under none): one device
        return value.device or tf.config.list_logical_devices()[0].name


def _per_call(function, argument) -> float:
    start = time.perf_counter()
    for _ in range(COMM_STEPS_PER_BLOCK):
        _sync(function(argument))
    return (time.perf_counter() - start) / COMM_STEPS_PER_BLOCK


def _sync(outputs) -> None:
    """Wait until the call's work is done (GPU kernels are queued asynchronously)."""
    sync_devices = getattr(tf.test.experimental, "sync_devices", None)
    if sync_devices is not None and tf.config.list_logical_devices("GPU"):
        sync_devices()


def traffic_per_device(algorithm: str, gradient_bytes: int, devices: int) -> int:
    """Bytes each device sends per step under the reduction algorithm (textbook counts).

    Ring (NCCL, or multi-worker runs' ring collective): 2(N-1)/N * S. Reduction to one device:
    the N-1 others send S each and receive S back, so the busiest device moves 2(N-1) * S; it is
    reported here. Hierarchical copy: counted like reduction to one device. One device moves
    nothing.
    """
    n = devices
    if n <= 1:
        return 0
    if "nccl" in algorithm or "ring" in algorithm:
        return int(2 * (n - 1) / n * gradient_bytes)
    return int(2 * (n - 1) * gradient_bytes)
