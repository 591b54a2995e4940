"""The devices at hand measured on JAX, every one busy at once: matrix products, elementwise
chains, a call's fixed cost and the collectives the plans use (`jax.shard_map`).

Each figure is a difference of two timed loops, k and 3k repetitions inside one compiled
program (`lax.fori_loop` with k traced, so one compile serves both), so neither the call's
dispatch nor the loop's entry is in it: what is left is one repetition's time, launch included.
See `analysis/cost_model/device_calibration.py` for what the caller makes of the points.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from ...runs.description.device_choice import DevicePlan
from ...runs.description.device_probe import ProbePlan
from ...runs.description.run_spec import RunSpec
from ..measuring.probe_timing import per_call, per_repetition, probe_answer
from ..work_count import answer

if TYPE_CHECKING:
    import jax
    import numpy as np

Held = TypeVar("Held")  # what `_ready` waits for and hands back

AXIS = "probe"
LOAD_SIZE = 128  # the product each device computes before each collective it is timed in
LOOP_STEPS = 64  # steps of each timed fit of Keras's loop
STEP_TIMING_S = 0.25  # a model's step is called until its calls took this long (7 at least)


def calibrate_with_jax(plan: DevicePlan, probe: ProbePlan, sender: Connection) -> None:
    """Child entry point (JAX server): send (True, points) or (False, one sentence)."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    answer(sender, lambda: measure(plan, probe))


def model_steps_with_jax(
    plan: DevicePlan, spec: RunSpec, batches: tuple[int, ...], sender: Connection
) -> None:
    """Child entry point (JAX server): the model's own step timed at `batches` samples per
    device, every device of `plan` training its own copy at once (no collective)."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    answer(sender, lambda: model_steps(plan, spec, batches))


def model_steps(plan: DevicePlan, spec: RunSpec, batches: tuple[int, ...]) -> dict[str, Any]:
    """The seconds of one training step of the model per batch (see above): a call's time
    less that of a call passing the same arrays through, so dispatch is not in it."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from ..work_count import batch_of, counted_model
    from .device_setup import configure_jax_devices, share_compilations

    devices = configure_jax_devices(plan)
    share_compilations(jax)
    g = len(devices)
    mesh = Mesh(np.array(devices), (AXIS,))
    x, y = batch_of(spec, 2)
    model = counted_model(spec, x)
    model.train_on_batch(x, y)  # builds what the step updates: optimizer slots, metrics

    # What a pipeline task costs the host beyond its work: its input put on its device, one
    # compiled call of the model's forward on two rows, and the wait for its result.
    forward = jax.jit(lambda t, n, x: model.stateless_call(t, n, x, training=True)[0])
    weights = [jax.device_put(np.asarray(v), devices[0]) for v in model.trainable_variables]
    others = [jax.device_put(np.asarray(v), devices[0]) for v in model.non_trainable_variables]
    task_s = per_call(
        lambda: forward(weights, others, jax.device_put(x, devices[0])), _ready, calls=20
    )

    def local_step(state, x, y):
        _, state = model.train_step(state, (x, y))  # Keras's own: loss, optimizer, metrics
        return state

    # The state donated, as Keras's own step donates it: updated in place, not copied.
    step = jax.jit(
        jax.shard_map(
            local_step, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)), out_specs=P(), check_vma=False
        ),
        donate_argnums=0,
    )
    replicated = NamedSharding(mesh, P())
    state = tuple(
        [jax.device_put(v.value, replicated) for v in variables]
        for variables in (
            model.trainable_variables,
            model.non_trainable_variables,
            model.optimizer.variables,
            model.metrics_variables,
        )
    )
    # What dispatching a call of this many arrays costs, for taking off each step's call.
    passed = jax.jit(lambda state, x, y: state, donate_argnums=0)
    seconds, dispatched = [], []
    for batch in batches:
        bx, by = batch_of(spec, batch * g)
        placed = [
            jax.tree.map(lambda a: jax.device_put(np.asarray(a), NamedSharding(mesh, P(AXIS))), t)
            for t in (bx, by)
        ]
        # One step per call, dispatch included (the caller takes the call's cost off): a
        # loop of steps inside one call would time another program (XLA's CPU convolutions
        # inside a while loop run several times slower).
        held = [state]

        def call(p: Any = placed, held: list[Any] = held) -> Any:
            held[0] = step(held[0], *p)
            return held[0]

        stepped = per_call(call, _ready, calls=7, at_least_s=STEP_TIMING_S)
        state = held[0]

        def dispatch(p: Any = placed, held: list[Any] = held) -> Any:
            held[0] = passed(held[0], *p)
            return held[0]

        passing = per_call(dispatch, _ready, calls=7, at_least_s=STEP_TIMING_S)
        seconds.append(max(stepped - passing, stepped / 2))
        dispatched.append(passing)
        state = held[0]
    loop_step_s, loop_call_s = _fit_loop_s(devices)
    reduce_s, reduce_bytes = 0.0, 0
    share = spec.training.batch_size // g
    if g > 1 and share in batches:
        reduce_bytes = 4 * sum(int(np.prod(v.shape)) for v in model.trainable_variables)
        reduce_s, state = _in_step_reduce(jax, mesh, step, local_step, state, spec, share, g)
    return {
        "devices": g,
        "batches": list(batches),
        "seconds": seconds,
        "dispatch_s": sorted(dispatched)[len(dispatched) // 2],
        "task_s": task_s,
        "reduce_s": reduce_s,
        "reduce_bytes": reduce_bytes,
        "reduce_batch": share,
        "loop_step_s": loop_step_s,
        "loop_call_s": loop_call_s,
    }


def _fit_loop_s(devices: list[Any]) -> tuple[float, float]:
    """Keras's `fit` loop on these devices around a step with next to no work (a batch spread
    by `keras.distribution.DataParallel` where there are several): seconds per step and per
    compiled call, from fits at 1 and at 8 steps per call (t(s) = step + call / s)."""
    import keras
    import numpy as np

    g = len(devices)
    previous = keras.distribution.distribution()
    if g > 1:
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    try:
        per_step = {}
        for together in (1, 8):
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
            model.compile(optimizer="sgd", loss="mse", steps_per_execution=together)
            x = np.zeros((8 * g * LOOP_STEPS, 8), np.float32)
            y = np.zeros((8 * g * LOOP_STEPS, 1), np.float32)
            model.fit(x, y, batch_size=8 * g, epochs=1, verbose=0)  # compiles
            times = []
            for _ in range(3):
                start = time.perf_counter()
                model.fit(x, y, batch_size=8 * g, epochs=1, verbose=0)
                times.append((time.perf_counter() - start) / LOOP_STEPS)
            per_step[together] = statistics.median(times)
    finally:
        keras.distribution.set_distribution(previous)
    call = max(per_step[1] - per_step[8], 0.0) * 8 / 7
    return max(per_step[1] - call, 0.0), call


def _in_step_reduce(
    jax: ModuleType,
    mesh: Any,
    step: Callable[..., Any],
    local_step: Callable[..., Any],
    state: Any,
    spec: RunSpec,
    share: int,
    g: int,
) -> tuple[float, Any]:
    """What spreading the model's step over the devices adds to each device's own step, at a
    data-parallel share of the batch: the same step compiled as Keras's `DataParallel` has
    XLA partition it (the batch split, the state replicated, the gradients' all-reduce where
    the partitioner puts it) against each device's step alone. The devices reach the
    all-reduce from the step's own work, not from a probe's short loop. Calls of the two
    alternate; the difference of their medians (0 at least), and the state."""
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from ..work_count import batch_of

    split, replicated = NamedSharding(mesh, P(AXIS)), NamedSharding(mesh, P())
    partitioned = jax.jit(
        local_step,
        in_shardings=(replicated, split, split),
        out_shardings=replicated,
        donate_argnums=0,
    )
    bx, by = batch_of(spec, share * g)
    x, y = (jax.tree.map(lambda a: jax.device_put(np.asarray(a), split), t) for t in (bx, by))
    held = [state]
    alone, spread = [], []
    for round_ in range(16):
        start = time.perf_counter()
        held[0] = _ready(step(held[0], x, y))
        middle = time.perf_counter()
        held[0] = _ready(partitioned(held[0], x, y))
        end = time.perf_counter()
        if round_ > 0:  # the first compiles
            alone.append(middle - start)
            spread.append(end - middle)
    return max(statistics.median(spread) - statistics.median(alone), 0.0), held[0]


def measure(plan: DevicePlan, probe: ProbePlan) -> dict[str, Any]:
    """Every point of `probe` on `plan`'s devices, as plain lists (see the module)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from .device_setup import configure_jax_devices, device_names

    started = time.perf_counter()
    devices = configure_jax_devices(plan)
    g = len(devices)
    mesh = Mesh(np.array(devices), (AXIS,))
    split = NamedSharding(mesh, P(AXIS))
    deadline = started + probe.budget_s

    def placed(array: np.ndarray) -> jax.Array:
        return jax.device_put(array, split)

    def repeated(body: Callable[[jax.Array], jax.Array]) -> Callable[..., jax.Array]:
        return jax.jit(lambda x, k: jax.lax.fori_loop(0, k, lambda _, c: body(c), x))

    matmuls = []
    for shape in probe.matmuls:
        a = placed(np.full((g, shape.m, shape.k), 0.5, np.float32))
        b = placed(np.eye(shape.k, shape.n, dtype=np.float32)[None].repeat(g, 0))
        if shape.k != shape.n:  # a chain needs square products: time one product per call
            step = jax.jit(lambda a, b: jnp.matmul(a, b))
            seconds = per_call(lambda a=a, b=b, step=step: step(a, b), _ready)
        else:
            chain = repeated(lambda c, b=b: jnp.matmul(c, b))
            seconds = per_repetition(lambda k, a=a, c=chain: c(a, k), _ready)
        matmuls.append({"m": shape.m, "k": shape.k, "n": shape.n, "seconds": seconds})

    elementwise = []
    for size in probe.elementwise:
        x = placed(np.ones((g, size), np.float32))
        chain = repeated(lambda c: c * np.float32(0.999) + np.float32(0.001))
        elementwise.append(
            {"elements": size, "seconds": per_repetition(lambda k, x=x, c=chain: c(x, k), _ready)}
        )

    tiny = placed(np.ones((g, 8), np.float32))
    one_call = jax.jit(lambda c: c + 1)
    call_s = per_call(lambda: one_call(tiny), _ready, calls=50)

    collectives = []
    # Each collective is timed between products on every device, as in a training step: the
    # devices arrive at it from work, and where they share cores a late one holds the rest.
    work = placed(np.full((g, LOAD_SIZE, LOAD_SIZE), 0.5, np.float32))

    def busy_loop(collective: Callable[[jax.Array], jax.Array] | None) -> Callable[..., Any]:
        def local(v, w, k):
            def one(_, carry):
                v, w = carry
                w = jnp.matmul(w, load_local(w))
                if collective is not None:
                    v = collective(v + w[:, :1, 0] * 0.0)
                return v, w

            return jax.lax.fori_loop(0, k, one, (v, w))

        return jax.jit(
            jax.shard_map(
                local,
                mesh=mesh,
                in_specs=(P(AXIS), P(AXIS), P()),
                out_specs=(P(AXIS), P(AXIS)),
                check_vma=False,
            )
        )

    def load_local(w: jax.Array) -> jax.Array:
        return jnp.eye(LOAD_SIZE, dtype=w.dtype)[None]

    idle = 0.0
    if g > 1:
        tiny_v = placed(np.ones((g, g), np.float32))
        alone = busy_loop(None)
        idle = per_repetition(lambda k: alone(tiny_v, work, k), _ready)
        for kind in probe.collectives:
            for nbytes in probe.message_bytes:
                if time.perf_counter() > deadline:
                    break
                elements = max(g, nbytes // 4 // g * g)
                x = placed(np.ones((g, elements), np.float32))
                timed = busy_loop(_collective(jax, kind, g))
                loaded = per_repetition(lambda k, x=x, c=timed: c(x, work, k), _ready)
                collectives.append(
                    {"kind": kind, "bytes": elements * 4, "seconds": max(loaded - idle, 1e-9)}
                )
    points = {
        "matmuls": matmuls,
        "elementwise": elementwise,
        "call_s": call_s,
        "collectives": collectives,
    }
    description = "" if plan.kind == "cpu" else str(getattr(devices[0], "device_kind", "GPU"))
    names = list(device_names(devices))
    return probe_answer(names, plan.kind, description, points, {"jax": jax.__version__}, started)


def _collective(jax: ModuleType, kind: str, g: int) -> Callable[[jax.Array], jax.Array]:
    """One repetition of `kind` on a device's block (1 × elements), its shape kept."""
    lax = jax.lax
    scale = 1.0 / g  # keeps a repeated sum from growing
    if kind == "all_reduce":
        return lambda v: lax.psum(v, AXIS) * scale
    if kind == "all_gather":
        return lambda v: lax.all_gather(v, AXIS, axis=1, tiled=True)[:, : v.shape[1]]
    if kind == "reduce_scatter":
        return lambda v: (
            lax.psum_scatter(v, AXIS, scatter_dimension=1, tiled=True).repeat(g, axis=1) * scale
        )
    if kind == "all_to_all":
        return lambda v: lax.all_to_all(v, AXIS, 1, 1, tiled=True)
    if kind == "send_receive":
        ring = [(i, (i + 1) % g) for i in range(g)]
        return lambda v: lax.ppermute(v, AXIS, ring)
    raise ValueError(f"no probe for the collective {kind!r}")


def _ready(value: Held) -> Held:
    import jax

    return jax.block_until_ready(value)
