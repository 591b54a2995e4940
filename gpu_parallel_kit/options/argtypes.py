"""Command-line value converters shared by `gpk` and the `%gpk` magic, so both read a value the
same way and say the same sentence when it is wrong.

Each takes the option's `name` (the option table passes it), so the sentence says which option
the value was for: "epochs=0 is not a positive whole number".
"""

from __future__ import annotations

import argparse

# The readers of strategies' options live with their `Option` record; both front ends read them
# from here with the rest.
from ..strategies.option import bad_value as _bad
from ..strategies.option import balance, mesh, micro_batches, positive, whole

__all__ = [
    "amount",
    "balance",
    "device_choice",
    "epochs",
    "fraction",
    "mesh",
    "micro_batches",
    "positive",
    "target",
    "timeout",
    "whole",
]


def amount(text: str, name: str = "") -> float:
    """A positive number in any notation: 7e9 parameters, 1.5e6 activation elements."""
    try:
        value = float(text)
    except ValueError:
        raise _bad(name, repr(text), "is not a number like 7e9") from None
    if not value > 0:
        raise _bad(name, text, "is not positive")
    return value


def device_choice(text: str, name: str = "") -> int | list[int]:
    """'2' is a count; '0,1' (or '1,' for one index) are device indices, as in `gpk run`."""
    try:
        if "," not in text:
            return int(text)
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise _bad(name, repr(text), "is not a count like 2 or indices like 0,1") from None


def timeout(text: str, name: str = "") -> float | None:
    if text.lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise _bad(name, repr(text), "is not a number of seconds or none") from None


def fraction(text: str, name: str = "") -> float:
    """A share of the training data strictly between 0 and 1, such as 0.1."""
    try:
        value = float(text)
    except ValueError:
        raise _bad(name, repr(text), "is not a fraction like 0.1") from None
    if not 0.0 < value < 1.0:
        raise _bad(name, text, "is not a fraction between 0 and 1, e.g. 0.1")
    return value


def epochs(text: str, name: str = "") -> float:
    """A number of epochs, fractions allowed (0.5), 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise _bad(name, repr(text), "is not a number of epochs like 1") from None
    if value < 0:
        raise _bad(name, text, "is negative; use 0 or more epochs")
    return value


def target(text: str, name: str = "") -> str:
    """METRIC=VALUE (direction from the name), METRIC>=VALUE or METRIC<=VALUE, checked here; the
    parser's own sentence already names the target."""
    from ..errors import GpkError
    from ..runs.description.accuracy_target import parse_target

    try:
        parse_target(text)
    except GpkError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text
