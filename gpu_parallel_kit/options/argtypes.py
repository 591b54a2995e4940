"""Command-line value converters shared by `gpk` and the `%gpk` magic, so both read a value the
same way and say the same sentence when it is wrong.

Each takes the option's `name` (the option table passes it), so the sentence says which option
the value was for: "epochs=0 is not a positive whole number".
"""

from __future__ import annotations

import argparse


def _bad(name: str, shown: object, why: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{name}={shown} {why}" if name else f"{shown} {why}")


def whole(text: str, name: str = "") -> int:
    try:
        return int(text)
    except ValueError:
        raise _bad(name, repr(text), "is not a whole number") from None


def positive(text: str, name: str = "") -> int:
    value = whole(text, name)
    if value < 1:
        raise _bad(name, value, "is not a positive whole number")
    return value


def amount(text: str, name: str = "") -> float:
    """A positive number in any notation: 7e9 parameters, 1.5e6 activation elements."""
    try:
        value = float(text)
    except ValueError:
        raise _bad(name, repr(text), "is not a number like 7e9") from None
    if not value > 0:
        raise _bad(name, text, "is not positive")
    return value


def micro_batches(text: str, name: str = "") -> int | str:
    """A positive count, or auto: the worker measures the micro-batch curve and picks M."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return positive(text, name)
    except argparse.ArgumentTypeError:
        raise _bad(name, repr(text), "is not a positive whole number or auto") from None


def device_choice(text: str, name: str = "") -> int | list[int]:
    """'2' is a count; '0,1' (or '1,' for one index) are device indices, as in `gpk run`."""
    try:
        if "," not in text:
            return int(text)
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise _bad(name, repr(text), "is not a count like 2 or indices like 0,1") from None


def balance(text: str, name: str = "") -> str | list[int] | list[str]:
    """params, time, layer indices (3,6) or layer names (conv4_block1_out,conv5_block1_out)
    where stages 1.. begin."""
    if text in ("params", "time"):
        return text
    parts = [part.strip() for part in text.split(",")]
    if all(part.lstrip("-").isdigit() for part in parts):
        return [int(part) for part in parts]
    if all(part.isidentifier() or part.replace("/", "_").isidentifier() for part in parts):
        return parts
    raise _bad(name, repr(text), "is not params, time, layer indices like 3,6 or layer names")


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
    from ..runs.target import parse_target

    try:
        parse_target(text)
    except GpkError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def mesh(text: str, name: str = "") -> tuple[int, int]:
    """'2x2' or '2,2': a (data, model) mesh for tensor parallelism."""
    parts = text.replace("x", ",").split(",")
    try:
        data, model = (int(part) for part in parts)
    except ValueError:
        raise _bad(name, repr(text), "is not two whole numbers like 2x2 (data x model)") from None
    if data < 1 or model < 1:
        raise _bad(name, repr(text), "needs at least 1 device on each axis, like 2x2")
    return data, model
