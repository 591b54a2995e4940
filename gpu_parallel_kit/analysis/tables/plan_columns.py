"""The `data`, `tensor` and `stages` columns of every row: a run's devices on each plan axis,
named as `Plans.table` names them; for a run of a searched plan, the plan's other fields and
`scaled`.

An axis a run does not spread over counts 1, so a searched plan's shape and a run of it line up.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from ...runs.results.run_result import RunResult
from ...strategies import strategy_record
from ...strategies.plan_axes import DATA, RAN_PLAN, STAGES, TENSOR, plan_shape

PLAN_COLUMNS = (DATA, TENSOR, STAGES)  # the table's order: outermost first


def plan_cells(result: RunResult) -> dict[str, int]:
    """The row's devices on each plan axis, from its strategy's axis and its mesh."""
    try:
        axis = strategy_record(result.strategy).plan_axis
    except Exception:  # noqa: BLE001 - a row of a strategy this version lacks spreads nothing
        axis = None
    return plan_shape(axis, max(int(result.devices or 1), 1), result.mesh or "")


def with_ran_plans(table: pd.DataFrame, results: Sequence[RunResult]) -> pd.DataFrame:
    """`table` (one row per result) with the fields of the searched plan each run ran, as its
    row keeps them (`Experiment.run_plan`): `sharding`, `micro_batch_size`, ..., `scaled`, after
    `devices`. A column the table has already keeps its values, the plan's filling its blanks
    (a pipeline's schedule, which only pipeline runs fill). Unchanged when no run ran a plan."""
    shapes = [result.extra.get(RAN_PLAN) or {} for result in results]
    if not any(shapes):
        return table
    at = list(table.columns).index("devices") + 1
    for column in dict.fromkeys(key for shape in shapes for key in shape):
        values = [shape.get(column) for shape in shapes]
        if column not in table.columns:
            table.insert(at, column, values)
            at += 1
            continue
        blank = table[column].isna() | (table[column].astype(str) == "")
        table[column] = table[column].astype(object).where(~blank, values)
    return table
