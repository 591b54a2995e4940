"""The notebook front end: the `%gpk` magic and the widget panel.

`%load_ext gpu_parallel_kit` lands in `load_ipython_extension` below. Loading is cheap and never
imports TensorFlow (or ipywidgets, until a panel is opened): the kernel stays free to configure
its own TensorFlow runtime later, as `notebooks/02_data_parallelism.ipynb` does.
"""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """Register `%gpk`, and the hook that lets a result the magic displayed show only once."""
    from .magics import GpkMagics
    from .views import forget_shown

    ipython.register_magics(GpkMagics)
    if forget_shown not in ipython.events.callbacks["post_execute"]:
        ipython.events.register("post_execute", forget_shown)


def __getattr__(name: str) -> Any:
    """`from gpu_parallel_kit.notebook import Panel, Request`, imported only when asked for, so
    loading the extension does not import ipywidgets."""
    if name == "Panel":
        from .panel import Panel

        return Panel
    if name == "Request":
        from ..options.request import Request

        return Request
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
