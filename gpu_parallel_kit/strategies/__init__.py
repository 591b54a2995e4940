"""The strategy registry: one record per strategy, asked by every room that needs to know one.

>>> from gpu_parallel_kit.strategies import strategy
>>> strategy("model").name          # the seed's word is an alias
'pipeline'
>>> strategy("tensor").offered_on("tensorflow")
False

Adding a strategy: write its record in a module of this package and list it in `REGISTERED`,
write its worker class (named in `workers`), its projector (named in `projector`) and its tests;
docs/ARCHITECTURE.md, "How to add a strategy", walks through it.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import GpkError
from .batches import check_batch
from .data import DATA
from .fsdp import FSDP
from .multiworker import MULTIWORKER
from .pipeline import DATA_PIPELINE, PIPELINE
from .record import GridCell, Strategy
from .single import SINGLE
from .tensor import TENSOR

# In the order help texts, choices and tables list them.
REGISTERED: tuple[Strategy, ...] = (
    SINGLE,
    DATA,
    PIPELINE,
    MULTIWORKER,
    TENSOR,
    FSDP,
    DATA_PIPELINE,
)
BACKENDS = ("tensorflow", "jax")
# What `compare()`, `gpk demo` and the panel compare unless told otherwise.
DEFAULT_COMPARISON: tuple[str, ...] = (SINGLE.name, DATA.name)

_BY_NAME: dict[str, Strategy] = {name: record for record in REGISTERED for name in record.names()}

__all__ = [
    "BACKENDS",
    "DEFAULT_COMPARISON",
    "DATA_PIPELINE",
    "REGISTERED",
    "GridCell",
    "Strategy",
    "accepted_names",
    "canonical",
    "check_backend",
    "check_batch",
    "has",
    "lookup",
    "projectable_names",
    "resolve",
    "runnable",
    "runnable_names",
    "strategy",
    "strategy_record",
]


def lookup(name: Any) -> Strategy | None:
    """The record of `name` (a strategy's name or alias), or None for an unknown name, e.g. a
    row an older kit logged under a strategy this one no longer has."""
    return _BY_NAME.get(name) if isinstance(name, str) else None


def has(name: Any, flag: str) -> bool:
    """Whether the strategy `name` has `flag` (a boolean field of its record, e.g. "baseline");
    False for a name no record knows. For pandas: `df["strategy"].map(partial(has, flag=...))`."""
    record = lookup(name)
    return bool(getattr(record, flag)) if record is not None else False


def strategy(name: Any) -> Strategy:
    """The record of a strategy a user named; an unknown name is one sentence naming the known."""
    record = lookup(name)
    if record is None or not record.runnable:
        raise GpkError(f"strategy={name!r} is not known; use one of {', '.join(runnable_names())}")
    return record


def canonical(name: str) -> str:
    """The name tables show for `name`: "model" reads "pipeline"; unknown names stay as they are."""
    record = lookup(name)
    return name if record is None else record.name


def runnable() -> tuple[Strategy, ...]:
    return tuple(r for r in REGISTERED if r.runnable)


def runnable_names() -> tuple[str, ...]:
    return tuple(r.name for r in runnable())


def accepted_names() -> tuple[str, ...]:
    """Every name a user may type for a runnable strategy, aliases last."""
    names = runnable_names()
    return names + tuple(a for r in runnable() for a in r.aliases)


def projectable_names() -> tuple[str, ...]:
    return tuple(r.name for r in REGISTERED if r.projector is not None)


def check_backend(backend: str, name: str) -> Strategy:
    """A known backend and a strategy it offers; checked before any device is planned."""
    if backend not in BACKENDS:
        raise GpkError(f"backend={backend!r} is not known; use one of {', '.join(BACKENDS)}")
    record = strategy(name)
    if not record.offered_on(backend):
        raise GpkError(
            f"strategy={name!r} is not available on backend={backend!r}: {record.missing[backend]}"
        )
    return record


def resolve(path: str) -> Any:
    """The object an import path "package.module:attribute" names (a worker class, a projector)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


strategy_record = strategy  # the name to import where `strategy` is a run's name already
