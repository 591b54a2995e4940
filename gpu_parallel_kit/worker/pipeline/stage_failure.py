"""A pipeline stage's pass that fails while its layers are traced or differentiated, refused in
one sentence naming its layers, whatever the backend."""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable
from typing import Any

from ...errors import GpkError

# Where a model that cannot be cut into stages trains instead.
ELSEWHERE = "strategy='data', or backend='jax' with strategy='tensor'"


def layers_named(
    backend: str, runtime_errors: tuple[type[BaseException], ...], stage_of: Callable[[Any], Any]
) -> Callable[[Callable], Callable]:
    """A decorator of a stage's passes: a Python failure in one refuses the model in one
    sentence naming the stage's layers, its text kept on the worker's stderr; the kit's own
    errors, `runtime_errors` (the backend's, out of memory among them) and `MemoryError` pass
    unchanged.

    Args:
        backend: the backend's name, as the sentence says it ("TensorFlow", "JAX").
        runtime_errors: the backend's runtime error types.
        stage_of: the decorated method's `self` -> the stage, with its `index` and `cut`.
    """

    def decorate(task: Callable) -> Callable:
        @functools.wraps(task)
        def run(self: Any, *args: Any) -> Any:
            try:
                return task(self, *args)
            except (GpkError, MemoryError, *runtime_errors):
                raise
            except Exception as error:  # noqa: BLE001 - named below, its text kept on stderr
                traceback.print_exc(file=sys.stderr)
                stage = stage_of(self)
                first, last = stage.cut.calls[0], stage.cut.calls[-1]
                layers = f"layer {first!r}" if first == last else f"layers {first!r} to {last!r}"
                raise GpkError(
                    f"stage {stage.index}'s {layers} cannot be run as a pipeline stage on "
                    f"{backend} ({type(error).__name__} in its {task.__name__} pass), so the "
                    f"model cannot be cut into stages; use {ELSEWHERE}"
                ) from None

        return run

    return decorate
