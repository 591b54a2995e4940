"""What the magic and the panel show: a compact results table, and "displayed once" results.

`cmp = %gpk compare ...` must show the table and plot *and* return the comparison, but IPython
only displays a line's value when it is not assigned. So the magic displays its result itself;
when the line is not assigned, IPython's display hook then asks the same object to display itself
a second time, in the same cell. `ShowOnce` skips exactly that one repeat (the mark is cleared
after every cell by `forget_shown`, registered as a post_execute hook by the extension), so the
result appears once either way and displays normally when evaluated later.
"""

from __future__ import annotations

import pandas as pd
from IPython.display import HTML, display

from ..analysis.convergence import has_convergence
from ..analysis.tables import NOT_REACHED
from ..comparison import Comparison
from ..plots.comparison import comparison_figure
from ..runs.results import RunResult

# The columns that answer "which is fastest, and did it work" (the full table has 33).
SUMMARY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("strategy", "strategy"),
    ("devices", "devices"),
    ("virtual", "virtual"),
    ("schedule", "schedule"),
    ("micro_batches", "micro-batches"),
    ("global_batch", "global batch"),
    ("status", "status"),
    ("step_time_s", "step time (s)"),
    ("throughput_samples_s", "samples/s"),
    ("speedup", "speedup"),
    ("efficiency", "efficiency"),
    ("bubble_fraction", "bubble"),
    ("state_bytes", "state (MiB)"),
    ("peak_memory_bytes", "peak memory (MiB)"),
    ("reason", "reason"),
)
# Shown, before the reason, when a run has a target or a learning-rate rule.
CONVERGENCE_SUMMARY: tuple[tuple[str, str], ...] = (
    ("learning_rate", "learning rate"),
    ("time_to_target_s", "time to target (s)"),
    ("epochs_to_target", "epochs to target"),
    ("time_to_target_speedup", "speedup to target"),
)
_BYTES = ("state_bytes", "peak_memory_bytes")
_just_shown: int | None = None  # id() of the object the magic displayed in the running cell


def summary_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The comparison table's key columns, bytes in MiB, headers in words; empty columns of
    strategies that were not run (e.g. the bubble without a model run) are left out."""
    frame = pd.DataFrame(index=table.index)
    columns = list(SUMMARY_COLUMNS)
    if has_convergence(table):
        columns[-1:-1] = CONVERGENCE_SUMMARY
    for column, header in columns:
        if column not in table.columns:
            continue
        values = table[column]
        if column == "time_to_target_s" and "target_reached" in table.columns:
            missed = (table["target_reached"] == False).fillna(False)  # noqa: E712
            values = pd.Series(
                [
                    NOT_REACHED if miss else "" if pd.isna(v) else _number(v)
                    for v, miss in zip(values, missed, strict=True)
                ],
                index=values.index,
                dtype=object,
            )
        if column in _BYTES:
            values = values / 2**20
        if (
            column in ("schedule", "micro_batches", "bubble_fraction", "reason")
            and not (values.notna() & (values.astype(str) != "")).any()
        ):
            continue
        if pd.api.types.is_extension_array_dtype(values) or values.dtype == bool:
            # pandas' <NA> and True/False read badly in a table meant for people
            values = values.astype(object).map(_cell)
        frame[header] = values
    return frame


def _cell(value: object) -> object:
    if value is pd.NA:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return value


def _number(value: float) -> str:
    """Four significant digits, but whole numbers from 10 000 up (throughput, not 1.2e+04)."""
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.4g}"


def summary_html(table: pd.DataFrame) -> str:
    """The summary as an HTML table (class `gpk-table`), four significant digits."""
    if table.empty:
        return "<p class='gpk-table'>(no runs)</p>"
    return summary_frame(table).to_html(
        index=False,
        na_rep="",
        classes="gpk-table",
        float_format=_number,
        border=0,
    )


class ShowOnce:
    """Mixin: the magic calls `show()`; IPython's same-cell repeat of it is skipped."""

    def _show(self) -> None:
        raise NotImplementedError

    def show(self) -> None:
        """Display now, and let the display hook's repeat in this cell pass silently."""
        global _just_shown
        self._show()
        _just_shown = id(self)

    def _ipython_display_(self) -> None:
        global _just_shown
        if _just_shown == id(self):
            _just_shown = None
            return
        self._show()


def forget_shown(*_: object) -> None:
    """post_execute hook: a later cell that evaluates the result displays it again."""
    global _just_shown
    _just_shown = None


class ShownComparison(ShowOnce, Comparison):
    """The Comparison `%gpk compare` returns: the API's object, shown as summary and plot."""

    def _show(self) -> None:
        table = self.table
        display(HTML(summary_html(table)))
        display(comparison_figure(table))
        if any(r.ok and r.target for r in self.results):
            display(self.plot_convergence())


def show_run(result: RunResult) -> None:
    """One run's summary row, and its pipeline chart when it has one (model parallel)."""
    display(HTML(summary_html(Comparison([result]).table)))
    if result.ok and result.extra.get("planned_timeline"):
        display(result.plot_timeline())
