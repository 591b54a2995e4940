"""Rows of a table asked about their strategy's record, never about its name."""

from __future__ import annotations

import pandas as pd

from ...strategies import has, lookup


def flagged(rows: pd.DataFrame, flag: str) -> pd.Series:
    """Which rows' strategies have `flag` set in their record (e.g. "baseline"); False for a
    strategy no record knows, such as one an older kit logged."""
    return rows["strategy"].map(lambda name: has(name, flag)).astype(bool)


def fills(rows: pd.DataFrame, column: str) -> bool:
    """Whether any row's strategy fills `column` (its record's `columns`)."""
    return bool(rows["strategy"].map(lambda name: column in _columns_of(name)).any())


def row_fills(name: str, column: str) -> bool:
    """Whether the strategy `name` fills `column` (its record's `columns`)."""
    return column in _columns_of(name)


def _columns_of(name: str) -> tuple[str, ...]:
    record = lookup(name)
    return record.columns if record is not None else ()
