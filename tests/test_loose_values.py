"""`docs/loose_values.py` counts bare-tuple returns and `Any` annotations, as its page says."""

from __future__ import annotations

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).parent.parent
_SPEC = importlib.util.spec_from_file_location("loose_values", ROOT / "docs" / "loose_values.py")
loose_values = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(loose_values)

SOURCE = """
from typing import Any, NamedTuple

class Pair(NamedTuple):
    low: float
    high: float

def loose(x: Any) -> tuple[float, float]:
    return 1.0, 2.0

def bare() -> tuple:
    return ()

def named(x: dict[str, Any]) -> Pair:
    kept: Any = x
    return Pair(1.0, 2.0)
"""


def test_a_module_counts_its_tuple_returns_and_each_any():
    assert loose_values.count_file(SOURCE) == (2, 3)


def test_a_tree_sums_its_modules(tmp_path):
    (tmp_path / "a.py").write_text(SOURCE)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("def f() -> tuple[int, ...]: ...\n")
    assert loose_values.count_tree(tmp_path) == loose_values.LooseCount(3, 3)
