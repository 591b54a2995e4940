"""The backend registry: one record per backend, asked by every room that needs to know one.

>>> from gpu_parallel_kit.backends import backend
>>> backend("jax").display
'JAX'
>>> backend("tensorflow").splits_gpus
True
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import GpkError
from .jax import JAX
from .record import Backend
from .tensorflow import TENSORFLOW

# In the order help texts and choices list them, and discovery prefers them when no run says.
REGISTERED: tuple[Backend, ...] = (TENSORFLOW, JAX)
DEFAULT: Backend = next(record for record in REGISTERED if record.default)

_BY_NAME: dict[str, Backend] = {record.name: record for record in REGISTERED}

__all__ = [
    "DEFAULT",
    "JAX",
    "REGISTERED",
    "TENSORFLOW",
    "Backend",
    "backend",
    "backend_record",
    "lookup",
    "names",
    "of_row",
    "tagged",
]


def lookup(name: Any) -> Backend | None:
    """The record of `name`, or None for a name no record knows."""
    return _BY_NAME.get(name) if isinstance(name, str) else None


def of_row(name: Any) -> Backend:
    """The backend a table row ran on: rows without one (logged before JAX runs) ran on the
    default; a name no record knows reads as an unknown non-default backend's."""
    if not isinstance(name, str):
        return DEFAULT
    return lookup(name) or Backend(name=name, display=name, package=name, tag=name)


def backend(name: Any) -> Backend:
    """The record of a backend a user named; an unknown name is one sentence naming the known."""
    record = lookup(name)
    if record is None:
        raise GpkError(f"backend={name!r} is not known; use one of {', '.join(names())}")
    return record


def tagged(backends: Iterable[Any]) -> bool:
    """Whether a table's `backend` values hold one other than the default: then tables and
    figures say each row's backend."""
    return any(not of_row(name).default for name in backends)


def names() -> tuple[str, ...]:
    return tuple(record.name for record in REGISTERED)


backend_record = backend  # the name to import where `backend` is a run's name already
