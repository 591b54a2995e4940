"""The strategy registry: one record per strategy, asked by every room that needs to know one.

>>> from gpu_parallel_kit.strategies import strategy_record
>>> strategy_record("model").name          # the seed's word is an alias
'pipeline'
>>> strategy_record("tensor").offered_on("tensorflow")
False

Adding a strategy: write its record in a module of this package and list it in `REGISTERED`,
write its worker class (named in `worker_classes`), its projector (named in `projector`) and its
tests; its options are listed on its record (`Strategy.options`).
docs/ARCHITECTURE.md, "How to add a strategy", walks through it.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import GpkError
from .batches import check_batch
from .data import DATA
from .expert import EXPERT
from .fsdp import FSDP
from .multiworker import MULTIWORKER
from .option import Option
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
    EXPERT,
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
    "Option",
    "Strategy",
    "accepted_names",
    "canonical",
    "check_backend",
    "check_batch",
    "has",
    "lookup",
    "option_named",
    "option_owners",
    "options",
    "projectable_names",
    "resolve",
    "runnable",
    "runnable_names",
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


def strategy_record(name: Any) -> Strategy:
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
    record = strategy_record(name)
    if not record.offered_on(backend):
        raise GpkError(
            f"strategy={name!r} is not available on backend={backend!r}: {record.missing[backend]}"
        )
    return record


def resolve(path: str) -> Any:
    """The object an import path "package.module:attribute" names (a worker class, a projector)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)


def options() -> tuple[Option, ...]:
    """Every option a runnable strategy takes, once each, in the registry's order: the keywords
    of `run()`, `compare()` and `plan()` beyond those every run takes. Where strategies share
    one (tensor's and fsdp's `mesh`), the first to list it gives its type and default."""
    found: dict[str, Option] = {}
    for record in runnable():
        for each in record.options:
            found.setdefault(each.name, each)
    return tuple(found.values())


def option_named(name: str) -> Option | None:
    """The option `name` of some strategy, or None when no strategy takes it."""
    return next((each for each in options() if each.name == name), None)


def option_owners(name: str) -> tuple[Strategy, ...]:
    """The runnable strategies that take the option `name`."""
    return tuple(r for r in runnable() if name in r.option_names())


def _check_shared_options() -> None:
    # One keyword, one meaning: strategies sharing an option agree on how it reads and defaults.
    for each in options():
        for record in option_owners(each.name):
            own = next(o for o in record.options if o.name == each.name)
            if (own.type, own.default, own.choices) != (each.type, each.default, each.choices):
                raise AssertionError(f"{record.name}'s option {each.name} differs from another's")


_check_shared_options()
