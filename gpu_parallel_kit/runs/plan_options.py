"""Strategy-specific settings of one run, shaped from what `Experiment.plan` was given.

A comparison passes every option to every run; each strategy takes its own here and the others
ignore them (a `data` run ignores `micro_batches`, a `model` run the tensor-parallel mesh).
"""

from __future__ import annotations

from typing import Any

from ..errors import GpkError
from .backends import check_layout_map


def pipeline_plan(
    strategy: str,
    schedule: str | None,
    micro_batches: int | None,
    balance: Any,
    recompute: bool,
    virtual_stages: int | None,
) -> dict[str, Any]:
    """Model-parallel settings: naive without micro-batches, gpipe when micro-batches are asked."""
    if strategy != "model":
        return {}
    if schedule is None:
        schedule = "gpipe" if micro_batches not in (None, 1) else "naive"
    return {
        "schedule": schedule,
        "micro_batches": 1 if micro_batches is None else micro_batches,
        "balance": list(balance) if isinstance(balance, tuple) else balance,
        "recompute": recompute,
        # Interleaved puts two model chunks on each device unless told otherwise.
        "virtual_stages": virtual_stages or (2 if schedule == "interleaved" else 1),
    }


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


def mesh_size(plan: dict[str, Any], count: int) -> int:
    mesh = plan.get("mesh")
    return count if mesh is None else int(mesh[0]) * int(mesh[1])


def tensor_plan(strategy: str, backend: str, mesh: Any, layout_map: Any) -> dict[str, Any]:
    """Backend, and the tensor-parallel mesh and layout; a comparison's other strategies ignore
    the mesh and layout, as they ignore `workers`."""
    if strategy != "tensor":
        return {"backend": backend}
    return {
        "backend": backend,
        "mesh": None if mesh is None else tuple(mesh) if isinstance(mesh, list) else mesh,
        "layout_map": check_layout_map(layout_map),
    }
