"""What every figure shares: strategy colours, titles that say what was measured, run labels,
the ghost bar of a run without a figure, and a Figure that shows itself in a notebook.

Every title says which scaling the runs used and whether the devices were virtual, because a
speedup measured on virtual devices carved out of one CPU means something else than one on GPUs.
Rows a cost model projected (`projected` column) are told apart from measured ones everywhere.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

from ..analysis.cost_model.compute_source import uncounted
from ..backends import Backend, of_row, tagged
from ..strategies import lookup
from ..strategies.expert import EXPERT_KINDS
from .figure_data import png_metadata

OTHER_COLOR = "tab:purple"  # a strategy no record knows, e.g. one an older kit logged


def plain_log_ticks(axes: Axes, plain: bool = True, minors: Sequence[str] = ("x", "y")) -> None:
    """Log axes labelled "6" and "20", not "6 × 10⁰" and "2 × 10¹" (`plain`), the 2, 3, … 9
    of the `minors` axes labelled too where they span under about a decade and a half; else
    (`plain=False`) matplotlib's powers of ten, and on such a short span, which may hold no
    power of ten, ticks at 2 and 5 of each decade as "2e+10" (matplotlib's own minor labels
    overlap there)."""
    for name, axis, (low, high) in (
        ("x", axes.xaxis, axes.get_xlim()),
        ("y", axes.yaxis, axes.get_ylim()),
    ):
        short = name in minors and low > 0 and high <= 30 * low
        if plain:
            axis.set_major_formatter(StrMethodFormatter("{x:,.4g}"))
        elif short:
            axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        labels = StrMethodFormatter("{x:,.4g}" if plain else "{x:.2g}")
        axis.set_minor_formatter(labels if short else NullFormatter())


def strategy_color(name: str) -> str:
    """The strategy's colour from its record, the same in every figure."""
    record = lookup(name)
    return record.color if record is not None else OTHER_COLOR


_MISSING_STYLE = {"fill": False, "hatch": "//", "edgecolor": "0.55", "linewidth": 1.0}


class DisplayFigure(Figure):
    """A Figure that shows itself inline in Jupyter without pyplot's global state.

    Figures built with the object API have no inline renderer unless pyplot's inline backend is
    active; returning PNG bytes here makes `cmp.plot()` display in any notebook or Voila page.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(
            buffer, format="png", dpi=100, bbox_inches="tight", metadata=png_metadata(self)
        )
        return buffer.getvalue()


# How a panel draws projected rows, named in its title: lines are dashed, bars pale and dotted.
DASHED = "dashed"
DOTTED_BARS = "pale dotted bars"
_TITLE_CHARACTERS = 44  # a title line that fits a third of an 11-inch figure at 12 points


def title(text: str, df: pd.DataFrame, projected_as: str = DASHED) -> str:
    """`text` with the scaling mode and, when any run used virtual devices, "(virtual devices)";
    with projected rows, a line saying how they are drawn (`projected_as`), and one saying so
    where their compute was measured, not counted."""
    notes = []
    if "scaling" in df.columns:
        modes = [mode for mode in dict.fromkeys(df["scaling"]) if isinstance(mode, str) and mode]
        if modes:
            notes.append(" and ".join(modes) + " scaling")
    if "virtual" in df.columns and df["virtual"].astype(bool).any():
        notes.append("(virtual devices)")
    lines = [text, " ".join(notes)] if notes else [text]
    labels = projection_labels(df)
    if labels:
        line = f"{projected_as}: projected ({', '.join(labels)}), not measured"
        # Wider than a third of a notebook-wide figure: the words split over two lines.
        lines.append(line if len(line) <= _TITLE_CHARACTERS else line.replace("), ", "),\n"))
        if "reason" in df.columns:
            not_counted = uncounted(df.loc[projected_rows(df), "reason"])
            lines += [not_counted] if not_counted else []
    return "\n".join(lines)


def projected_rows(df: pd.DataFrame) -> pd.Series:
    """Which rows a cost model projected (False for tables without the column)."""
    if "projected" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["projected"].fillna(False).astype(bool)


def projection_labels(df: pd.DataFrame) -> list[str]:
    return list(
        dict.fromkeys(projection_label(e) for e in df.loc[projected_rows(df), "experiment_id"])
    )


def projection_label(experiment_id: object) -> str:
    """What a projection was onto: projected experiment ids end in ":<label>"
    (analysis/cost_model/projected_rows.py)."""
    text = str(experiment_id)
    return text.rsplit(":", 1)[1] if ":" in text else "projected"


def backend_tags(df: pd.DataFrame) -> list[str]:
    """ " jax" or " tf" per row when the figure holds a JAX row, else "" (TensorFlow alone is
    the kit's default and needs no tag)."""
    if "backend" not in df.columns or not tagged(df["backend"]):
        return [""] * len(df)
    return [f" {of_row(b).tag}" for b in df["backend"]]


def backends_of(df: pd.DataFrame) -> set[Backend]:
    """The backends a figure's rows ran on (the default for a table without the column)."""
    return {of_row(b) for b in df["backend"]} if "backend" in df.columns else {of_row(None)}


def backend_color(color: str, backend: Backend) -> tuple[float, float, float]:
    """A strategy's colour as `backend`'s lines draw it where a figure holds several backends:
    lightened towards white by the record's shade."""
    return tuple(c + (1.0 - c) * backend.shade for c in to_rgb(color))  # type: ignore[return-value]


def mesh_tag(mesh: object) -> bool:
    """A tensor run's mesh is named in labels when it has a data axis ("2x2"); "1x4", every
    device on the model axis, is the default and goes without saying."""
    return isinstance(mesh, str) and "x" in mesh and not mesh.startswith("1x")


def series_names(df: pd.DataFrame) -> list[str]:
    """Each row's strategy as a figure names its series, with how its experts computed where a
    run has any (strategies/expert.py): "expert dense" for keras-hub's bank, "expert dispatched"
    for the kit's layer, so neither is read as the other."""
    kinds = df["experts"].fillna("") if "experts" in df.columns else [""] * len(df)
    return [
        f"{strategy} {kind}" if kind in EXPERT_KINDS else str(strategy)
        for strategy, kind in zip(df["strategy"], kinds, strict=True)
    ]


def run_labels(df: pd.DataFrame) -> list[str]:
    """Bar labels such as "data×2", "data×8 [nvlink4]" for a projected row, "tensor×4 jax"
    when the figure holds JAX rows, and "expert×4 dense" or "expert×4 dispatched"."""
    tags = [
        f" [{projection_label(e)}]" if p else ""
        for e, p in zip(df.get("experiment_id", [""] * len(df)), projected_rows(df), strict=True)
    ]
    meshes = [f" {m}" if mesh_tag(m) else "" for m in df.get("mesh", pd.Series([""] * len(df)))]
    kinds = [name.partition(" ")[2] for name in series_names(df)]
    return [
        f"{strategy}×{devices}{' ' + kind if kind else ''}{backend}{mesh}{tag}"
        for strategy, devices, kind, backend, mesh, tag in zip(
            df["strategy"], df["devices"], kinds, backend_tags(df), meshes, tags, strict=True
        )
    ]


def draw_missing_bars(
    ax: Axes, positions: Sequence[int], statuses: Sequence[str], present: Any, values: Any, gap: str
) -> None:
    """A run without a figure gets a ghost bar as tall as the tallest drawn one, so it is seen,
    labelled with its status, or `gap` when it finished but has no figure."""
    height = float(values[present].max()) if present.any() else 1.0
    for position, status, ok in zip(positions, statuses, present, strict=True):
        if not ok:
            ax.bar(position, height, **_MISSING_STYLE)
            label = gap if status == "ok" else str(status)
            ax.text(position, height / 2, label, rotation=90, ha="center", va="center")
