"""The work of one training step counted on JAX: XLA's cost analysis of Keras's own train step,
and of each layer call alone; see `worker/work_count.py`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from ...runs.description.run_spec import RunSpec
from ..work_count import answer, batch_of, counted_model

JAX_SOURCE = "xla cost analysis (jax)"
# A count reads the HLO after XLA's optimisation passes (its cost analysis, its fusions); how well
# LLVM then optimises the machine code changes neither, and unoptimised, the count's compiles and
# the model's initialisers take half the time (the built-in models' counts are the same).
UNOPTIMISED_MACHINE_CODE = "--xla_backend_optimization_level=0"
MAX_LAYERS = 400  # per-layer counts beyond this many layer calls are left out (compile time)


def count_with_jax(spec: RunSpec, batches: tuple[int, int], sender: Any) -> None:
    """Child entry point (JAX server): send (True, count dict) or (False, one sentence)."""
    from .device_setup import with_flag

    os.environ.setdefault("KERAS_BACKEND", "jax")
    # Before JAX's runtime starts, which reads the flags (the server never starts it).
    os.environ["XLA_FLAGS"] = with_flag(os.environ.get("XLA_FLAGS", ""), UNOPTIMISED_MACHINE_CODE)
    answer(sender, lambda: _count_jax(spec, batches))


def _count_jax(
    spec: RunSpec, batches: tuple[int, int], drawn_weights: bool = False
) -> dict[str, Any]:
    """The count (see the module). `drawn_weights`: initialise the weights as Keras would; by
    default they are zeros, as a count reads shapes, never values (`_weights_as_zeros`)."""
    import jax
    import keras

    from .device_setup import share_compilations

    if keras.backend.backend() != "jax":
        raise RuntimeError(f"Keras runs on {keras.backend.backend()!r} here, not on JAX")
    share_compilations(jax)  # a lab reopened in a fresh kernel loads its counts' programs
    started = time.perf_counter()
    x, _ = batch_of(spec, batches[0])
    with contextlib.nullcontext() if drawn_weights else _weights_as_zeros():
        model = counted_model(spec, x)
        model.optimizer.build(model.trainable_variables)
    steps = []
    for batch in batches:
        bx, by = batch_of(spec, batch)
        state = (
            [v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in model.optimizer.variables],
            [v.value for v in model.metrics_variables],
        )
        compiled = jax.jit(model.train_step).lower(state, (bx, by)).compile()
        cost = _cost(compiled)
        steps.append({"batch": batch, **cost, "kernels": _kernels(compiled)})
    layers = layer_counts(model, batches[0])
    return {
        "source": JAX_SOURCE,
        "steps": steps,
        "layers": layers,
        "parameters": _size(model.trainable_variables),
        "model": model.name,
        "count_s": time.perf_counter() - started,
    }


# What Keras's initialisers draw from on JAX (`keras/src/backend/jax/random.py`).
INITIAL_DRAWS = ("uniform", "normal", "truncated_normal")


@contextlib.contextmanager
def _weights_as_zeros() -> Iterator[None]:
    """While the model and its optimizer are built, `jax.random`'s draws give zeros. Each draw
    of a new shape compiles a random-number kernel: for the demo's MLP that was 0.5 s of the
    count, to make values the count never reads. Only the build: a draw inside the model's
    step (noise, dropout) is traced as it is, and counted."""
    import jax.numpy as jnp
    import jax.random

    drawn = {name: getattr(jax.random, name) for name in INITIAL_DRAWS}

    def zeros(*_: Any, shape: Any = (), dtype: Any = jnp.float32, **__: Any) -> Any:
        return jnp.zeros(shape, dtype)

    for name in INITIAL_DRAWS:
        setattr(jax.random, name, zeros)
    try:
        yield
    finally:
        for name, draw in drawn.items():
            setattr(jax.random, name, draw)


def _cost(compiled: Any) -> dict[str, float]:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list | tuple):  # older JAX: one dict per computation
        analysis = analysis[0] if analysis else {}
    return {
        "flops": float(analysis.get("flops", 0.0)),
        "bytes": float(analysis.get("bytes accessed", 0.0)),
    }


def _kernels(compiled: Any) -> int:
    """Instructions of the compiled entry computation that launch work: a fusion, a dot, a
    convolution, a custom call. On a GPU each of these is (about) one kernel launch."""
    try:
        text = compiled.as_text()
    except Exception:  # noqa: BLE001 - the launch floor then falls back to a default
        return 0
    entry = text.split("\nENTRY ", 1)[-1].split("\n}\n", 1)[0]
    skipped = ("parameter(", "get-tuple-element(", "tuple(", "constant(", "bitcast(")
    count = 0
    for line in entry.splitlines()[1:]:
        body = line.split("=", 1)[-1]
        if "=" in line and not any(s in body for s in skipped):
            count += 1
    return count


def layer_counts(model: Any, batch: int) -> list[dict[str, Any]]:
    """Each layer call of a functional model, compiled alone: forward FLOPs and bytes per
    batch of `batch`. Layers whose inputs are not known from the graph are left out."""
    import jax
    import keras

    counts: list[dict[str, Any]] = []
    for layer in getattr(model, "layers", [])[:MAX_LAYERS]:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        try:
            specs = keras.tree.map_structure(
                lambda t: jax.ShapeDtypeStruct((batch, *t.shape[1:]), t.dtype), layer.input
            )
            trainable = [v.value for v in layer.trainable_variables]
            frozen = [v.value for v in layer.non_trainable_variables]

            def forward(trainable, frozen, inputs, layer=layer):
                args = inputs if isinstance(inputs, list | tuple) and len(inputs) > 1 else [inputs]
                return layer.stateless_call(trainable, frozen, *args)[0]

            cost = _cost(jax.jit(forward).lower(trainable, frozen, specs).compile())
        except Exception:  # noqa: BLE001 - shared layers, subclassed inputs: left out
            continue
        counts.append(
            {
                "name": layer.name,
                "kind": type(layer).__name__,
                "forward_flops": cost["flops"] / batch,
                "forward_bytes": cost["bytes"] / batch,
                "parameters": _size(layer.trainable_variables),
            }
        )
    return counts


def _size(variables: Any) -> int:
    import math

    return int(sum(math.prod(v.shape) for v in variables))
