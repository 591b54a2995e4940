"""One option a strategy takes, as its record lists it, and the readers of its command-line text.

A strategy's record lists its options (`Strategy.options`); `Experiment.plan`, `RunSpec`, the
`gpk` and `%gpk` option table and the docs' option tables all read them from there, so adding an
option to a strategy touches its record and its worker class, nothing else.

Each reader takes the option's `name` (the option table passes it), so a bad value's sentence
says which option it was for: "micro_batches='x' is not a positive whole number or auto".
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_AS_DEFAULT = object()


@dataclass(frozen=True)
class Option:
    """One keyword of `run()`, `compare()` and `plan()` that a strategy takes.

    >>> Option("virtual_stages", positive, None, "model chunks each device holds").flag
    '--virtual-stages'

    Args:
        name: the keyword, e.g. `"micro_batches"`; the command line's flag is `--micro-batches`.
        type: reads the command line's text into the value (one of the readers below, `str` or
            `bool` for a switch); None: no command-line form, the API only.
        default: what a run is given unless the user says otherwise; None where the strategy's
            own rule decides, which `help` then says.
        help: one line for `--help`, `%gpk run --help` and the docs' option tables.
        choices: the names the value may take, e.g. the schedules.
        metavar: the command line's placeholder, e.g. `"M|auto"`.
        absent: what a run whose strategy lacks the option reads (a `data` run's `workers`
            is 1, its `schedule` ""); by default, `default`.
        backends: the backends that take it, e.g. `("jax",)`; (): every backend the strategy
            runs on.
    """

    name: str
    type: Callable[..., Any] | None
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    absent: Any = _AS_DEFAULT
    backends: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.absent is _AS_DEFAULT:
            object.__setattr__(self, "absent", self.default)

    @property
    def flag(self) -> str:
        """The command line's flag; a switch that is on by default reads `--no-<name>`."""
        dashed = self.name.replace("_", "-")
        return f"--no-{dashed}" if self.switch and self.default else f"--{dashed}"

    def taken_on(self, backend: str) -> bool:
        """Whether a run on `backend` takes it."""
        return not self.backends or backend in self.backends

    @property
    def switch(self) -> bool:
        """Whether the option is on or off, a flag without a value on the command line."""
        return self.type is bool


def bad_value(name: str, shown: object, why: str) -> argparse.ArgumentTypeError:
    """A command-line value's one sentence, naming its option when it has one."""
    return argparse.ArgumentTypeError(f"{name}={shown} {why}" if name else f"{shown} {why}")


def whole(text: str, name: str = "") -> int:
    try:
        return int(text)
    except ValueError:
        raise bad_value(name, repr(text), "is not a whole number") from None


def positive(text: str, name: str = "") -> int:
    value = whole(text, name)
    if value < 1:
        raise bad_value(name, value, "is not a positive whole number")
    return value


def micro_batches(text: str, name: str = "") -> int | str:
    """A positive count, or auto: the worker measures the micro-batch curve and picks M."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return positive(text, name)
    except argparse.ArgumentTypeError:
        raise bad_value(name, repr(text), "is not a positive whole number or auto") from None


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
    raise bad_value(name, repr(text), "is not params, time, layer indices like 3,6 or layer names")


def mesh(text: str, name: str = "") -> tuple[int, int]:
    """'2x2' or '2,2': a (data, model) mesh for tensor parallelism."""
    parts = text.replace("x", ",").split(",")
    try:
        data, model = (int(part) for part in parts)
    except ValueError:
        raise bad_value(
            name, repr(text), "is not two whole numbers like 2x2 (data x model)"
        ) from None
    if data < 1 or model < 1:
        raise bad_value(name, repr(text), "needs at least 1 device on each axis, like 2x2")
    return data, model
