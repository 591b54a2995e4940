"""A derived layout made Keras's `LayoutMap` over a JAX device mesh.

The layout rules are pure (`sharding/layout.py`); the model is read backend-free
(`worker/layers.py`).
"""

from __future__ import annotations

from typing import Any

import keras

from ...sharding.layout import Layout


def layout_map(layout: Layout, mesh: Any) -> Any:
    """The layout as Keras's `LayoutMap` over `mesh`, one exact variable path per key."""
    mapping = keras.distribution.LayoutMap(mesh)
    for path, axes in layout.axes_by_path().items():
        mapping[path] = tuple(axes)
    return mapping
