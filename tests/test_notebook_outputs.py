"""The executed notebooks agree with themselves: what a student reads is checked from the outputs.

- No `NaN` or `<NA>` is shown, in a table, a printed line or a figure's text.
- A chart draws the values of the table it illustrates, read from the figure's own data (the
  text chunk every kit figure's PNG carries, `plots/figure_data.py`), not from its pixels.
- A projection of the same model, batch, link, GPU and precision gives the same figure, within
  1 %, wherever it is shown: the cells that show one say what they project in their metadata
  (`"gpk": {"projection": {...}}`), and their tables are read back.
"""

from __future__ import annotations

import base64
import re
from collections import defaultdict

import nbformat
import pytest
from bs4 import BeautifulSoup

from gpu_parallel_kit.plots.figure_data import read_png_data
from tests.executed_notebooks import NOTEBOOKS

MISSING = re.compile(r"\bNaN\b|<NA>|\bnan\b")
UNITS = {
    "ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0,
    "B": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40,
}  # fmt: skip
WIDGET = "application/vnd.jupyter.widget-view+json"


def executed(executed_notebooks, stem: str):
    (path,) = [p for p in NOTEBOOKS if p.stem == stem]
    return nbformat.read(executed_notebooks(path), as_version=4)


def shown_texts(notebook) -> list[tuple[int, str]]:
    """(cell, text) for every output as JupyterLab shows it: HTML's text where there is HTML,
    else the plain text; widgets and errors aside."""
    found = []
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                found.append((index, output.text))
            data = output.get("data", {})
            if WIDGET in data or output.output_type == "error":
                continue
            if "text/html" in data:
                found.append((index, BeautifulSoup(data["text/html"], "html.parser").get_text(" ")))
            elif "text/markdown" in data:
                found.append((index, data["text/markdown"]))
            elif "text/plain" in data and "image/png" not in data:
                found.append((index, data["text/plain"]))
    return found


def tables(cell) -> list[list[dict[str, str]]]:
    """Each HTML table a cell shows, as rows of {header: cell text}."""
    found = []
    for output in cell.get("outputs", []):
        html = output.get("data", {}).get("text/html")
        if not html:
            continue
        for table in BeautifulSoup(html, "html.parser").find_all("table"):
            headers = [th.get_text(strip=True) for th in table.find("thead").find_all("th")]
            rows = []
            for tr in table.find("tbody").find_all("tr"):
                cells = [c.get_text(strip=True) for c in tr.find_all(["th", "td"])]
                rows.append(dict(zip(headers[-len(cells) :], cells, strict=True)))
            found.append(rows)
    return found


def figures(cell) -> list[dict]:
    """The figure data of every kit figure a cell shows."""
    found = []
    for output in cell.get("outputs", []):
        png = output.get("data", {}).get("image/png")
        data = read_png_data(base64.b64decode(png)) if png else None
        if data:
            found.append(data)
    return found


def value(text: str) -> float:
    """ "8.89 ms" -> 0.00889, "424 KiB" -> 434176.0, "1.62×" -> 1.62, "1,234" -> 1234.0."""
    number, _, unit = text.replace(",", "").replace("×", "").partition(" ")
    return float(number) * UNITS.get(unit, 1.0)


def cell_with(notebook, code: str):
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and code in c.source]
    return cell


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_nan_or_na_is_shown(path, executed_notebooks):
    notebook = nbformat.read(executed_notebooks(path), as_version=4)
    shown = [(i, t) for i, t in shown_texts(notebook) if MISSING.search(t)]
    for cell in notebook.cells:
        for data in figures(cell):
            for axis in data["axes"]:
                words = " ".join([axis["title"], axis["xlabel"], axis["ylabel"]])
                words += " " + " ".join(bar["label"] for bar in axis["bars"])
                if MISSING.search(words):
                    shown.append((notebook.cells.index(cell), words))
    assert not shown, f"cells showing NaN or <NA>: {shown}"


@pytest.mark.slow
def test_the_training_time_chart_draws_the_table_beside_it(executed_notebooks):
    notebook = executed(executed_notebooks, "04_choosing_a_strategy")
    (rows,) = tables(cell_with(notebook, "'training_time_s'"))
    table = {f"{r['strategy']}×{r['devices']}": value(r["training_time_s"]) for r in rows}
    (data,) = figures(cell_with(notebook, "proj.plot()"))
    (axis,) = [a for a in data["axes"] if a["title"].startswith("Training time")]
    unit = UNITS[axis["ylabel"].rpartition("(")[2].rstrip(")")]  # "training time (ms)"
    drawn = {bar["label"]: bar["value"] * unit for bar in axis["bars"]}
    assert drawn.keys() == table.keys()
    for label, seconds in drawn.items():  # the table shows three significant digits
        assert seconds == pytest.approx(table[label], rel=5e-3), label


@pytest.mark.slow
def test_the_traffic_chart_draws_the_traffic_table(executed_notebooks):
    notebook = executed(executed_notebooks, "07_when_the_model_does_not_fit")
    (rows,) = tables(cell_with(notebook, "traffic_table(cmp.results)"))
    (data,) = figures(cell_with(notebook, "cmp.plot_sharding()"))
    (axis,) = [a for a in data["axes"] if a["title"].startswith("what the fullest device sends")]
    drawn = [bar["value"] * 2**20 for bar in axis["bars"]]  # the chart is in MiB
    table = [value(r["per_device_bytes"]) if r["per_device_bytes"] not in ("", "—") else 0.0
             for r in rows]  # fmt: skip
    assert len(drawn) == len(table) and any(table)
    for bar, cell in zip(drawn, table, strict=True):
        assert bar == pytest.approx(cell, rel=5e-3, abs=1.0)


def projections(notebook) -> dict[tuple, list[float]]:
    """(what is projected, strategy, devices) -> the speedups the tagged cells show."""
    found = defaultdict(list)
    for cell in notebook.cells:
        what = cell.get("metadata", {}).get("gpk", {}).get("projection")
        if not what:
            continue
        shown = tables(cell)
        whats = what if isinstance(what, list) else [what] * len(shown)
        for projected, rows in zip(whats, shown, strict=True):
            key = tuple(sorted(projected.items()))
            for row in rows:
                if row.get("speedup"):
                    found[key, row.get("strategy"), row.get("devices")].append(
                        value(row["speedup"])
                    )
    return found


@pytest.mark.slow
def test_a_projection_gives_the_same_figure_wherever_it_is_shown(executed_notebooks):
    seen = defaultdict(list)
    for path in NOTEBOOKS:
        notebook = nbformat.read(executed_notebooks(path), as_version=4)
        for key, speedups in projections(notebook).items():
            seen[key] += [(path.stem, s) for s in speedups]
    repeated = {key: shown for key, shown in seen.items() if len(shown) > 1}
    assert repeated, "no projection is shown twice: nothing to compare"
    for key, shown in repeated.items():
        speedups = [s for _, s in shown]
        assert max(speedups) <= min(speedups) * 1.01, (key, shown)
