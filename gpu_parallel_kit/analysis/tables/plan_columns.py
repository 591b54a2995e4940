"""The `data`, `tensor` and `stages` columns of every row: a run's devices on each plan axis
(1 where an axis is absent), named as `Plans.table` names them, so a searched plan's shape and
a run of it line up."""

from __future__ import annotations

from ...runs.results.run_result import RunResult
from ...strategies import strategy_record
from ...strategies.plan_axes import DATA, STAGES, TENSOR, plan_shape

PLAN_COLUMNS = (DATA, TENSOR, STAGES)  # the table's order: outermost first


def plan_cells(result: RunResult) -> dict[str, int]:
    """The row's devices on each plan axis, from its strategy's axis and its mesh."""
    try:
        axis = strategy_record(result.strategy).plan_axis
    except Exception:  # noqa: BLE001 - a row of a strategy this version lacks spreads nothing
        axis = None
    return plan_shape(axis, max(int(result.devices or 1), 1), result.mesh or "")
