"""Turn the names typed after `%gpk` into the objects the API takes.

A magic's arguments are text; the user's model builder and arrays live in the notebook's
namespace. A name defined there wins (so a variable called `mlp` is the user's, as Python would
have it); otherwise a built-in model or data set name, or a `.keras` file, is passed on as text
for the API to check. Only plain names are looked up, never evaluated: a typo must give a
sentence, not run code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import GpkError
from ..runs.description.sources import BUILTIN_MODELS
from ..runs.description.synthetic_data import SYNTHETIC_SETS


def resolve_model(name: str, namespace: Mapping[str, Any]) -> Any:
    """The builder `name` names in the notebook, or a built-in model or .keras path as text."""
    if name in namespace:
        return namespace[name]
    if name in BUILTIN_MODELS or name.endswith(".keras"):
        return name
    builtins = ", ".join(BUILTIN_MODELS)
    raise GpkError(
        f"model {name!r} is not defined in this notebook and is not a built-in model ({builtins}) "
        f"or a .keras file; define a function {name}() that returns a Keras model, or pick one "
        "of those"
    )


def resolve_data(
    names: Sequence[str] | None, namespace: Mapping[str, Any], option: str = "--data"
) -> Any:
    """`x y` → the (x, y) arrays; one name → that object (a tuple, a dataset builder) or a
    built-in set; nothing → None (the built-in model's own set, or the API says what is missing).
    """
    if not names:
        return None
    sets = ", ".join(SYNTHETIC_SETS)
    if len(names) == 1:
        (name,) = names
        if name in namespace:
            return namespace[name]
        if name in SYNTHETIC_SETS:
            return name
        raise GpkError(
            f"{option} {name} is not defined in this notebook and is not a built-in set ({sets}); "
            "give the names of the input and target arrays, e.g. --data x y"
        )
    if len(names) == 2:
        return tuple(_defined(name, namespace, option) for name in names)
    raise GpkError(
        f"{option} takes one or two names (inputs and targets), not {len(names)}: "
        f"{' '.join(names)}; e.g. {option} x y"
    )


def resolve_validation(names: Sequence[str] | None, namespace: Mapping[str, Any]) -> Any:
    """`--validation x_val y_val` → arrays, one name → that object, a number → a fraction."""
    if names and len(names) == 1:
        try:
            return float(names[0])
        except ValueError:
            pass
    return resolve_data(names, namespace, option="--validation")


def _defined(name: str, namespace: Mapping[str, Any], option: str = "--data") -> Any:
    if name not in namespace:
        raise GpkError(
            f"{option} {name} is not defined in this notebook; run the cell that creates it first"
        )
    return namespace[name]
