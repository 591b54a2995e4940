"""Strategy-specific settings of one run, shaped from what `Experiment.plan` was given.

A comparison passes every option to every run; each strategy's record takes its own
(`Strategy.options`, shaped by `Strategy.settings`) and the others ignore them (a `data` run
ignores `micro_batches`, a `pipeline` run the tensor-parallel mesh). A name no strategy takes is
one sentence naming the nearest that one does.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import GpkError
from ...strategies import Strategy, options


def one_backend(backend: Any) -> str | None:
    """A run's backend: a name, or a list of one (as `gpk run --backend jax` gives it)."""
    if isinstance(backend, list | tuple):
        if len(backend) != 1:
            raise GpkError(
                f"backend={list(backend)} names {len(backend)} backends but a run has one; pass "
                "one, or use compare() to run each"
            )
        return backend[0]
    return backend


def strategy_fields(record: Strategy, backend: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The RunSpec fields the strategy's own options give, and the backend every run has."""
    return {"backend": backend, "options": record.settings(given)}


def strategy_keywords(plan: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: `plan`'s signature with every strategy's option (`strategies.options()`) as a
    keyword in place of its `**strategy_options`, as `help()`, the API reference and the option
    table's defaults read it."""
    signature = inspect.signature(plan)
    own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    taken = [
        inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=option.default)
        for option in options()
    ]
    plan.__signature__ = signature.replace(parameters=[*own, *taken])  # type: ignore[attr-defined]
    return plan


def given_options(
    given: Mapping[str, Any], plan: Callable[..., Any], compare: Callable[..., Any] | None = None
) -> dict[str, Any]:
    """Every strategy's option by name, as given or its default; an unknown keyword is a
    TypeError naming the nearest of `plan`'s, as Python's own for a misspelt keyword, or
    saying that `compare` takes it where it does (`rounds=` given to `run()`)."""
    known = {option.name: option.default for option in options()}
    for name in given:
        if name not in known:
            if compare is not None and name in inspect.signature(compare).parameters:
                raise TypeError(
                    f"{name}= is an option of compare(), not of plan() or run(); give it to "
                    "compare(), or drop it"
                )
            keywords = [k for k in inspect.signature(plan).parameters if k != "self"]
            nearest = difflib.get_close_matches(name, keywords, n=1)
            hint = f"did you mean {nearest[0]}=?" if nearest else "drop it"
            raise TypeError(
                f"{name}= is not an option of plan(), run() or compare(); {hint} (strategies' "
                f"options: {', '.join(known)})"
            )
    return {**known, **given}
