"""The work of one training step counted on TensorFlow, where JAX is not installed: the
profiler's float operations of the traced train step; see `worker/work_count.py`.
"""

from __future__ import annotations

import time
from typing import Any

from ...runs.description.run_spec import RunSpec
from ..work_count import answer, batch_of, counted_model

TENSORFLOW_SOURCE = "tensorflow profiler float ops"


def count_with_tensorflow(spec: RunSpec, batches: tuple[int, int], sender: Any) -> None:
    """Child entry point (TensorFlow fork server): the profiler's float-op count."""
    answer(sender, lambda: _count_tensorflow(spec, batches))


def _count_tensorflow(spec: RunSpec, batches: tuple[int, int]) -> dict[str, Any]:
    import tensorflow as tf

    started = time.perf_counter()
    steps = []
    x, _ = batch_of(spec, batches[0])
    model = counted_model(spec, x)
    for batch in batches:
        bx, by = batch_of(spec, batch)

        @tf.function
        def step(bx, by):
            with tf.GradientTape() as tape:
                loss = model.compute_loss(bx, by, model(bx, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            model.optimizer.apply(grads, model.trainable_variables)
            return loss

        graph = step.get_concrete_function(tf.constant(bx), tf.constant(by)).graph
        options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        options["output"] = "none"
        profile = tf.compat.v1.profiler.profile(graph, options=options)
        steps.append({"batch": batch, "flops": float(profile.total_float_ops), "bytes": 0.0})
    return {
        "source": TENSORFLOW_SOURCE,
        "steps": steps,
        "layers": [],
        "parameters": int(sum(int(v.shape.num_elements()) for v in model.trainable_variables)),
        "model": model.name,
        "count_s": time.perf_counter() - started,
    }
