"""The devices at hand measured on TensorFlow, every one busy at once: matrix products,
elementwise chains, a call's fixed cost, the collectives tf.distribute gives (all-reduce,
all-gather through `MirroredStrategy`, a copy between devices), and a model's own step.

Products and elementwise chains are a difference of two timed loops (`tf.while_loop`, k and 3k
repetitions, one on each device inside one `tf.function`), as on JAX
(`worker/jax/device_probe.py`); a collective is a compiled call's median less an empty call's.
"""

from __future__ import annotations

from . import tensorflow_first  # noqa: F401 - TensorFlow before Keras, quietly

# isort: split

import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import tensorflow as tf

from ...runs.description.device_choice import DevicePlan
from ...runs.description.device_probe import ProbePlan
from ...runs.description.run_spec import RunSpec
from ..measuring.probe_timing import per_call, per_repetition, probe_answer
from ..work_count import answer, batch_of, counted_model
from .device_setup import configure_worker_devices

CALLS = 20  # timed calls of a collective
# The longer loop of a model's steps lasts at least this long, and the two loops are at least
# this many steps apart: a step of 20 ms was the difference of loops 2 steps apart, and three
# calibrations moved it by half.
STEPS_S = 0.06
STEPS_APART = 16


def calibrate_with_tensorflow(plan: DevicePlan, probe: ProbePlan, sender: Connection) -> None:
    """Child entry point (TensorFlow fork server): send (True, points) or (False, a sentence)."""
    answer(sender, lambda: measure(plan, probe))


def model_steps_with_tensorflow(
    plan: DevicePlan, spec: RunSpec, batches: tuple[int, ...], sender: Connection
) -> None:
    """Child entry point: the model's own step at `batches` samples per device, a copy of the
    model on every device of `plan` training at once."""
    answer(sender, lambda: model_steps(plan, spec, batches))


def measure(plan: DevicePlan, probe: ProbePlan) -> dict[str, Any]:
    started = time.perf_counter()
    names = configure_worker_devices(plan)
    g = len(names)
    deadline = started + probe.budget_s

    def on_each(make: Callable[[], Any], body: Callable[[Any], Any]) -> Callable[[int], Any]:
        starts = []
        for name in names:
            with tf.device(name):
                starts.append(make())

        @tf.function
        def loops(k):
            ends = []
            for name, start in zip(names, starts, strict=True):
                with tf.device(name):
                    ends.append(
                        tf.while_loop(
                            lambda i, _: i < k, lambda i, c: (i + 1, body(c)), (0, start)
                        )[1]
                    )
            return ends

        return lambda k: loops(tf.constant(k))

    matmuls = []
    for shape in probe.matmuls:
        if shape.k != shape.n:
            continue
        b = tf.eye(shape.n)
        run = on_each(lambda s=shape: tf.fill((s.m, s.k), 0.5), lambda c, b=b: tf.matmul(c, b))
        matmuls.append(
            {"m": shape.m, "k": shape.k, "n": shape.n, "seconds": per_repetition(run, _done)}
        )
    elementwise = []
    for size in probe.elementwise:
        run = on_each(lambda s=size: tf.ones((s,)), lambda c: c * 0.999 + 0.001)
        elementwise.append({"elements": size, "seconds": per_repetition(run, _done)})
    tiny = on_each(lambda: tf.ones((8,)), lambda c: c + 1.0)
    call_s = per_call(lambda: tiny(0), _done, CALLS)

    collectives = []
    if g > 1:
        strategy = tf.distribute.MirroredStrategy(list(names))
        for kind in ("all_reduce", "all_gather", "send_receive"):
            for nbytes in probe.message_bytes:
                if time.perf_counter() > deadline:
                    break
                elements = max(1, nbytes // 4)
                call = _collective(strategy, names, kind, elements)
                seconds = per_call(call, _done, CALLS // 2) - call_s
                if seconds > 0:  # else below an empty call's cost (a copy within one host)
                    collectives.append({"kind": kind, "bytes": elements * 4, "seconds": seconds})
    points = {
        "matmuls": matmuls,
        "elementwise": elementwise,
        "call_s": call_s,
        "collectives": collectives,
    }
    description = "" if plan.kind == "cpu" else "GPU"
    versions = {"tensorflow": tf.__version__}
    return probe_answer(list(names), plan.kind, description, points, versions, started)


def _collective(
    strategy: Any, names: tuple[str, ...], kind: str, elements: int
) -> Callable[[], Any]:
    if kind == "send_receive":  # a copy from each device to the next, all at once
        blocks = []
        for name in names:
            with tf.device(name):
                blocks.append(tf.ones((elements,)))

        @tf.function
        def sends():
            moved = []
            for i, block in enumerate(blocks):
                with tf.device(names[(i + 1) % len(names)]):
                    moved.append(tf.identity(block) + 0.0)
            return moved

        return sends
    values = strategy.experimental_distribute_values_from_function(lambda _: tf.ones((elements,)))

    def replica(v):
        context = tf.distribute.get_replica_context()
        if kind == "all_reduce":
            return context.all_reduce(tf.distribute.ReduceOp.SUM, v)
        return context.all_gather(v, axis=0)

    @tf.function
    def call():
        return strategy.run(replica, args=(values,))

    return call


def model_steps(plan: DevicePlan, spec: RunSpec, batches: tuple[int, ...]) -> dict[str, Any]:
    """The seconds of one training step of a copy of the model on each device, all at once,
    as a difference of two loops of steps inside one call (`tf.range`, as Keras runs several
    steps per execution), so the call is not in it; and what the call itself costs, dispatch
    and the model's captured variables: a call of one step less one step in the loop."""
    names = configure_worker_devices(plan)
    x, y = batch_of(spec, 2)
    models = []
    for name in names:
        with tf.device(name):
            model = counted_model(spec, x)
            model.train_on_batch(x, y)  # builds what the step updates: optimizer slots, metrics
            models.append(model)

    seconds, dispatch = [], []
    for batch in batches:
        bx, by = batch_of(spec, batch)
        placed = []
        for name in names:
            with tf.device(name):
                placed.append(
                    (tf.nest.map_structure(tf.constant, bx), tf.nest.map_structure(tf.constant, by))
                )

        @tf.function
        def steps(k, placed=placed):
            for _ in tf.range(k):
                for name, model, (px, py) in zip(names, models, placed, strict=True):
                    with tf.device(name):
                        model.train_step((px, py))
            return [model.optimizer.iterations for model in models]

        step = per_repetition(
            lambda k, steps=steps: steps(tf.constant(k)), _done, STEPS_S, STEPS_APART
        )
        one = tf.constant(1)
        called = per_call(lambda steps=steps, one=one: steps(one), _done, 5, at_least_s=STEPS_S)
        seconds.append(step)
        dispatch.append(max(called - step, 0.0))
    return {
        "devices": len(names),
        "batches": list(batches),
        "seconds": seconds,
        "dispatch_s": sorted(dispatch)[len(dispatch) // 2],
        "task_s": _task_s(names[0], models[0], x),
    }


def _task_s(name: str, model: Any, x: Any) -> float:
    """What a pipeline task costs the host beyond its work: its input put on its device, one
    compiled call of the model's forward on two rows, and the wait for its result."""
    forward = tf.function(lambda px: model(px, training=True))

    def task() -> Any:
        with tf.device(name):
            return forward(tf.nest.map_structure(tf.identity, x))

    return per_call(task, _done, 20)


def _done(value: Any) -> None:
    for item in tf.nest.flatten(value):
        if hasattr(item, "numpy"):
            item.numpy()
