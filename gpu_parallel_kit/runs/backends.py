"""Which backend trains a run, what each offers, and the tensor-parallel mesh and layout checks.

TensorFlow runs train under tf.distribute; JAX runs under Keras 3's own `keras.distribution`
(docs/ARCHITECTURE.md). Plain values, checked in the caller, one sentence per mistake.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import GpkError

BACKENDS = ("tensorflow", "jax")
# What each backend trains with: tf.distribute on TensorFlow; keras.distribution on JAX.
BACKEND_STRATEGIES = {
    "tensorflow": ("single", "data", "model", "multiworker"),
    "jax": ("single", "data", "tensor"),
}
# Why a backend lacks a strategy, and what to use instead: the end of a one-sentence refusal.
MISSING_STRATEGY = {
    ("tensorflow", "tensor"): (
        "Keras's tensor parallelism (ModelParallel with a LayoutMap) runs on JAX only, its "
        "TensorFlow side being an unfinished prototype; use backend='jax'"
    ),
    ("jax", "model"): (
        "the kit's pipeline stages run on TensorFlow devices; use backend='tensorflow', or "
        "strategy='tensor' to split layers over devices on JAX"
    ),
    ("jax", "multiworker"): (
        "multi-worker training runs through TensorFlow's MultiWorkerMirroredStrategy; use "
        "backend='tensorflow'"
    ),
}
MODES = ("fit", "explicit")
ALL_REDUCE = ("auto", "nccl", "hierarchical", "reduce_to_one", "ring")
# MultiWorkerMirroredStrategy's collective implementations: ring (gRPC) or NCCL on GPUs.
MULTIWORKER_ALL_REDUCE = ("auto", "ring", "nccl")
SCALING = ("strong", "weak")


def check_backend(backend: str, strategy: str) -> None:
    """A known backend, and a strategy it offers; checked before any device is planned."""
    if backend not in BACKENDS:
        raise GpkError(f"backend={backend!r} is not known; use one of {', '.join(BACKENDS)}")
    if strategy not in BACKEND_STRATEGIES[backend]:
        raise GpkError(
            f"strategy={strategy!r} is not available on backend={backend!r}: "
            f"{MISSING_STRATEGY[(backend, strategy)]}"
        )


def check_mesh(mesh: Any, devices: int) -> tuple[int, int]:
    """A (data, model) pair of positive whole numbers whose product is the device count."""
    if (
        not isinstance(mesh, tuple | list)
        or len(mesh) != 2
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in mesh)
    ):
        raise GpkError(
            f"mesh={mesh!r} must be two positive whole numbers (data, model), e.g. mesh=(2, 2)"
        )
    data, model = mesh
    if data * model != devices:
        raise GpkError(
            f"mesh={tuple(mesh)} holds {data * model} devices but the run has {devices}; make "
            f"data × model equal devices, e.g. mesh=(1, {devices})"
        )
    return data, model


def check_layout_map(layout_map: Any) -> tuple[tuple[str, tuple[str | None, ...]], ...]:
    """The user's layout as (pattern, axes) pairs: patterns compile, axes name mesh axes."""
    if not layout_map:
        return ()
    if hasattr(layout_map, "items"):
        items = list(layout_map.items())
    elif isinstance(layout_map, tuple | list) and all(
        isinstance(pair, tuple | list) and len(pair) == 2 for pair in layout_map
    ):
        items = list(layout_map)  # (pattern, axes) pairs, as a RunSpec holds them
    else:
        raise GpkError(
            f"layout_map={layout_map!r} must map variable-path patterns to axes, e.g. "
            "{'.*dense/kernel': (None, 'model')}"
        )
    pairs = []
    for pattern, axes in items:
        axes = getattr(axes, "axes", axes)  # a keras.distribution.TensorLayout gives its axes
        try:
            re.compile(pattern)
        except (re.error, TypeError):
            raise GpkError(
                f"layout_map key {pattern!r} is not a regular expression over variable paths; "
                "use e.g. '.*dense/kernel'"
            ) from None
        if axes is None:
            axes = ()
        if not isinstance(axes, tuple | list) or any(
            a not in (None, "batch", "model") for a in axes
        ):
            raise GpkError(
                f"layout_map[{pattern!r}]={axes!r} must be a tuple of 'batch', 'model' or None "
                "per dimension, e.g. (None, 'model')"
            )
        pairs.append((pattern, tuple(axes)))
    return tuple(pairs)
