"""Command-line value converters shared by `gpk` and the `%gpk` magic, so both read a value the
same way and say the same sentence when it is wrong."""

from __future__ import annotations

import argparse


def whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def positive(text: str) -> int:
    value = whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive whole number")
    return value


def device_choice(text: str) -> int | list[int]:
    """'2' is a count; '0,1' (or '1,' for one index) are device indices, as in `gpk run`."""
    try:
        if "," not in text:
            return int(text)
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a count like 2 or indices like 0,1"
        ) from None


def balance(text: str) -> str | list[int]:
    if text in ("params", "time"):
        return text
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not params, time or layer indices like 3,6"
        ) from None


def timeout(text: str) -> float | None:
    if text.lower() == "none":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds or none") from None


def fraction(text: str) -> float:
    """A share of the training data strictly between 0 and 1, such as 0.1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction like 0.1") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1, e.g. 0.1")
    return value


def epochs(text: str) -> float:
    """A number of epochs, fractions allowed (0.5), 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of epochs like 1") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} epochs is negative; use 0 or more")
    return value


def target(text: str) -> str:
    """METRIC=VALUE (direction from the name), METRIC>=VALUE or METRIC<=VALUE, checked here."""
    from .convergence import parse_target
    from .errors import GpkError

    try:
        parse_target(text)
    except GpkError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text
