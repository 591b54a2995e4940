"""Strategy-specific settings of one run, shaped from what `Experiment.plan` was given.

A comparison passes every option to every run; each strategy's record takes its own
(`Strategy.plan`) and the others ignore them (a `data` run ignores `micro_batches`, a `pipeline`
run the tensor-parallel mesh).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import GpkError
from ..strategies import Strategy


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


def strategy_fields(record: Strategy, backend: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """The RunSpec fields the strategy's own options give, and the backend every run has."""
    return {"backend": backend, **record.plan(options)}
