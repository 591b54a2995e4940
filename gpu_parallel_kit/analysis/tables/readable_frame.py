"""A comparison table that keeps its numbers and displays them for people.

`cmp.table` is data: seconds, bytes and ratios as floats, for code to compute with. A notebook
that shows a few of its columns (`cmp.table[["strategy", "step_time_s", "comm_bytes"]]`) should
not show `0.008889`, `433704.0`, `NaN` or `<NA>`. `RunFrame` is a DataFrame whose values are
unchanged and whose HTML display writes each figure by what its column's name says it holds:
times in ms (or s, or µs) with the unit, bytes in KiB/MiB, shares in %, speedups as "1.62×",
rates as "169k", FLOPs as "151M", other whole numbers with thousands separators
("16,384"), and nothing where a figure does not apply; a frame whose `attrs["not_done"]`
holds a footnote writes "—" there instead, with the footnote under the table. Column names stay
as they are: they are what a reader types next. Every frame computed from it (a selection,
`.round()`, a query) displays the same way.
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Callable

import pandas as pd

from .cell_text import (
    bytes_text,
    count_text,
    format_number,
    missing,
    ratio_text,
    share_text,
    three_digits,
)

# Columns holding a share of something (0.43 -> "43%").
_SHARES = ("share", "fraction", "efficiency", "bubble_theoretical", "bubble_simulated")


def time_text(seconds: object) -> str:
    """A duration with its unit, three significant digits: "4.72 ms", "12.3 s", "8 µs"."""
    if missing(seconds):
        return ""
    value = float(seconds)
    if value == 0:
        return "0"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if abs(value) >= scale:
            return f"{three_digits(value / scale)} {unit}"
    return f"{three_digits(value / 1e-9)} ns"


def rate_text(value: object, unit: str) -> str:
    """A rate with its unit: "169k/s"."""
    return "" if missing(value) else f"{count_text(value)}{unit}"


def formatter(column: str) -> Callable[[object], str] | None:
    """How a numeric column's cells are written, by what its name says it holds."""
    name = column.lower()
    if name.endswith("_bytes_s"):
        return lambda v: "" if missing(v) else f"{bytes_text(v)}/s"
    if name.endswith("samples_s"):
        return lambda v: rate_text(v, "/s")  # before "_s": a rate, not a time
    if name.endswith("_bytes"):
        return bytes_text
    if name.endswith("flops"):
        return count_text
    if "speedup" in name or name.endswith("_factor"):
        return ratio_text
    if any(word in name for word in _SHARES):
        return share_text
    if name.endswith("_s") and not name.endswith("_steps"):
        return time_text
    return None


def readable_cells(df: pd.DataFrame, absent: str = "") -> pd.DataFrame:
    """`df` as text cells for people, the same columns and index; a figure that does not apply
    is `absent` (blank, or "—" where a footnote says why)."""
    cells = {}
    for column in df.columns:
        values = df[column]
        write = formatter(str(column)) or format_number
        if pd.api.types.is_bool_dtype(values):
            cells[column] = ["" if missing(v) else "yes" if v else "no" for v in values]
        elif pd.api.types.is_numeric_dtype(values):
            cells[column] = [absent if missing(v) else write(v) for v in values]
        else:
            cells[column] = ["" if _blank(v) else str(v) for v in values]
    return pd.DataFrame(cells, index=df.index, columns=df.columns, dtype=object)


def _blank(value: object) -> bool:
    try:
        return bool(missing(value) or pd.isna(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False  # a list or a dict: shown as it is


class RunFrame(pd.DataFrame):
    """A comparison table: its values untouched, its HTML display readable (`readable_cells`).

    Long texts, such as a failed run's reason, are shown whole, never cut with "...";
    headers may break after their underscores.
    """

    @property
    def _constructor(self) -> type[RunFrame]:
        return RunFrame

    def _repr_html_(self) -> str:
        rows, columns = pd.get_option("display.max_rows"), pd.get_option("display.max_columns")
        frame = pd.DataFrame(self)
        name = f"gpk-{next(_TABLES)}"
        footnote = self.attrs.get("not_done", "")
        labelled = _labelled(frame.index)
        with pd.option_context("display.max_colwidth", None):
            cells = readable_cells(frame, "—" if footnote else "")
            text = cells.to_html(
                max_rows=rows,
                max_cols=columns,
                classes="gpk-readable",
                table_id=name,
                index=labelled,
            )
        text = _HEADER.sub(lambda m: m.group(1) + m.group(2).replace("_", "_<wbr>") + "</th>", text)
        if footnote and cells.isin(["—"]).any().any():
            text += f"<p><small>{html.escape(footnote)}</small></p>"
        return _left_aligned_words(frame, name, 2 if labelled else 1) + text


def _labelled(index: pd.Index) -> bool:
    """Whether the rows' labels say something: a name or text, not the positions a selection
    left over from the whole table (11, 15, ...)."""
    return index.name is not None or not pd.api.types.is_integer_dtype(index)


def _left_aligned_words(frame: pd.DataFrame, name: str, first: int) -> str:
    """Text columns (a strategy, a reason) read from the left; numbers stay right-aligned, so
    their digits line up. `first`: the cell of the first column (2 when the index is shown)."""
    words = [
        place + first
        for place, column in enumerate(frame.columns)
        if not pd.api.types.is_numeric_dtype(frame[column])
        or pd.api.types.is_bool_dtype(frame[column])
    ]
    if not words:
        return ""
    cells = ",".join(f"#{name} td:nth-child({k}),#{name} th:nth-child({k})" for k in words)
    return f"<style>{cells}{{text-align:left}}</style>"


_TABLES = itertools.count()  # a table's own id: its style must not reach the tables beside it


# A header may break after an underscore ("simulated_step_<wbr>time_s"): a column of short
# cells is then as narrow as its cells, not as its name, and the name still reads as typed.
_HEADER = re.compile(r"(<th[^>]*>)(.*?)</th>", re.DOTALL)
