"""A derived layout made Keras's `LayoutMap` over a JAX device mesh, and checked against it.

The layout rules are pure (`sharding/layout.py`); the model is read backend-free
(`worker/layers.py`).
"""

from __future__ import annotations

from typing import Any

import keras

from ...errors import GpkError
from ...sharding.layout import Axes, Layout, indivisible


def layout_map(layout: Layout, mesh: Any) -> Any:
    """The layout as Keras's `LayoutMap` over `mesh`, one exact variable path per key."""
    mapping = keras.distribution.LayoutMap(mesh)
    for path, axes in layout.axes_by_path().items():
        mapping[path] = tuple(axes)
    return mapping


def own_layout(model: keras.Model, mesh: Any) -> tuple[tuple[str, Axes], ...]:
    """The model's own sharding as (pattern, axes) pairs: `get_layout_map(mesh)` of the model,
    or of the first model inside it that has one (keras-hub's Llama, Gemma and Qwen backbones);
    one sentence when none has."""
    for candidate in _models(model):
        get_layout_map = getattr(type(candidate), "get_layout_map", None)
        if callable(get_layout_map):
            mapping = get_layout_map(mesh)
            return tuple((pattern, tuple(mapping[pattern].axes)) for pattern in mapping)
    raise GpkError(
        f"layout_map='own' takes the model's get_layout_map(), but {model.name!r} and the "
        "models inside it have none (keras-hub's Llama, Gemma and Qwen backbones do); drop it "
        "for the kit's own layout, or pass patterns, e.g. layout_map={'.*dense/kernel': "
        "(None, 'model')}"
    )


def _models(model: Any):
    yield model
    for layer in getattr(model, "layers", []):
        if isinstance(layer, keras.Model):
            yield from _models(layer)


def check_divides(layout: Layout, sizes: dict[str, int]) -> None:
    """One sentence for a pattern's split that the mesh does not divide (`indivisible`)."""
    found = indivisible(layout, sizes)
    if found is None:
        return
    placement, dimension, axis = found
    whose = "the model's own layout (get_layout_map)" if placement.role == "own" else "layout_map"
    raise GpkError(
        f"{whose} splits {placement.path!r} of shape {placement.shape} on dimension {dimension} "
        f"({placement.shape[dimension]}) over the {axis!r} axis of {sizes[axis]} devices, which "
        f"does not divide it; use a mesh whose {axis!r} axis divides it, or the kit's own layout "
        "(drop layout_map)"
    )
