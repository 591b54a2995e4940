"""Write a comparison to a directory: the table as CSV and markdown, and the plots as PNGs.

A practitioner's question ("which strategy, how many GPUs?") ends in a report they paste
somewhere; this puts every artefact of one comparison in one folder with fixed names, so a script,
the `gpk` command and a notebook all produce the same files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from .analysis.tables.advice import advice
from .analysis.tables.comparison_table import markdown_table
from .analysis.tables.time_to_accuracy import convergence_summary, rows_with_target
from .plots.communication import communication_figure
from .plots.comparison import speedup_figure, throughput_figure, wall_time_figure
from .plots.convergence import convergence_figure, time_to_target_figure
from .runs.results.run_result import RunResult

DPI = 110
_FIGURES: tuple[tuple[str, Callable[[pd.DataFrame], Figure]], ...] = (
    ("wall_time.png", wall_time_figure),
    ("throughput.png", throughput_figure),
    ("speedup.png", speedup_figure),
    ("communication.png", communication_figure),
)


def write_report(
    df: pd.DataFrame, directory: str | os.PathLike[str], results: Sequence[RunResult] = ()
) -> list[Path]:
    """Write `table.csv`, `table.md` (with the advice sentence under the table) and the plots
    (wall time, throughput, speedup, communication) into `directory` (created if missing).
    With the runs' `results`, also `convergence.png` when a run recorded a curve (two epochs or
    more), and
    `time_to_target.png` when they had a target.

    The CSV keeps every column at full precision; the markdown is rounded for reading.
    Existing files of the same names are replaced. Returns the paths written, in that order.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / "table.csv"
    df.to_csv(csv_path, index=False)
    markdown_path = folder / "table.md"
    sentence = advice(df) if not df.empty else ""
    sentence = "\n\n".join(s for s in (sentence, convergence_summary(df)) if s)
    markdown_path.write_text(markdown_table(df) + "\n\n" + sentence + "\n", encoding="utf-8")
    written = [csv_path, markdown_path]
    figures = list(_FIGURES)
    # A curve needs two points: a one-epoch run has one, and its plot would be a dot per run on an
    # axis that says "1e-7+1.521019".
    if any(r.ok and len(r.history_time_s) >= 2 for r in results):
        figures.append(("convergence.png", lambda _: convergence_figure(results)))
        if not rows_with_target(df).empty:
            figures.append(("time_to_target.png", time_to_target_figure))
    for name, build in figures:
        figure = build(df)
        path = folder / name
        figure.savefig(path, dpi=DPI)
        # Object-API figures are not registered with pyplot, so there is nothing to close
        # there; clearing drops the artists at once instead of waiting for the collector.
        figure.clear()
        written.append(path)
    return written
