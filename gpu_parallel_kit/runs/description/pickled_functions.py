"""Send a user's function to a worker process: cloudpickle, with one sentence when it cannot.

A builder that closes over (or reads a global holding) a lock, an open file, a live connection or
a TensorFlow object cannot cross to the worker. cloudpickle says only what type failed
("cannot pickle '_thread.lock' object"); the sentence here also says which name in the user's
function holds it and what to do, before any worker starts.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

import cloudpickle

from ...errors import GpkError


def pickled(function: Callable[..., Any], what: str, name: str) -> bytes:
    """`function` as bytes for the worker; `what` says which argument it is ("model builder")."""
    try:
        return cloudpickle.dumps(function)
    except Exception as error:  # noqa: BLE001 - pickle raises TypeError, PicklingError and more
        culprit = _culprit(function)
        if culprit is None:
            raise GpkError(
                f"the {what} {name} cannot be sent to a worker process: something it holds "
                f"cannot be pickled ({_what_failed(error)}); make it a plain function that "
                "creates everything it needs inside itself"
            ) from None
        held, value = culprit
        raise GpkError(
            f"the {what} {name} cannot be sent to a worker process: it uses {held!r}, a "
            f"{type(value).__name__}, which cannot be pickled; create {held!r} inside the "
            "function instead"
        ) from None


def _what_failed(error: Exception) -> str:
    """ "a _thread.lock" from "cannot pickle '_thread.lock' object", else the error's kind."""
    text = str(error)
    if text.startswith("cannot pickle '") and "'" in text[15:]:
        return "a " + text[15:].split("'")[0]
    return type(error).__name__


def _culprit(function: Any) -> tuple[str, Any] | None:
    """The first name the function reads (closure, then globals) whose value cannot be pickled."""
    for held, value in _names_read(function):
        try:
            cloudpickle.dumps(value)
        except Exception:  # noqa: BLE001 - this is the one
            return held, value
    return None


def _names_read(function: Any) -> Iterator[tuple[str, Any]]:
    code = getattr(function, "__code__", None)
    if code is None:
        return
    cells = getattr(function, "__closure__", None) or ()
    for held, cell in zip(code.co_freevars, cells, strict=False):
        try:
            yield held, cell.cell_contents
        except ValueError:  # an empty cell
            continue
    namespace = getattr(function, "__globals__", {})
    for held in _global_names(code):
        if held in namespace and not isinstance(namespace[held], types.ModuleType):
            yield held, namespace[held]


def _global_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):  # nested functions and lambdas
            yield from _global_names(constant)


def keras_config(value: Any) -> Any:
    """Keras objects cross to the worker as their config; strings, dicts, factories as is."""
    if value is None or isinstance(value, str | dict) or not hasattr(value, "get_config"):
        return value
    import keras

    return keras.saving.serialize_keras_object(value)
