"""What the magic and the panel show: the compact table (`analysis.tables.compact_view`), and
"displayed once" results.

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

from ..analysis.tables.compact_view import compact_frame, compact_html
from ..comparison import Comparison
from ..plots.comparison import comparison_figure
from ..runs.results.run_result import RunResult

_just_shown: int | None = None  # id() of the object the magic displayed in the running cell


def summary_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The comparison's compact view (`analysis.tables.compact_view`): key columns, headers in
    words."""
    return compact_frame(table)


def summary_html(table: pd.DataFrame) -> str:
    """The compact view as HTML, with failed runs' whole reasons on lines under it."""
    return compact_html(table)


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
    """One run's summary row, and its pipeline chart when it has one."""
    display(HTML(summary_html(Comparison([result]).table)))
    if result.ok and result.extra.get("planned_timeline"):
        display(result.plot_timeline())
