"""Count the loose values in a package: bare-tuple returns and `Any` annotations.

`python docs/loose_values.py gpu_parallel_kit` prints two numbers. A bare-tuple return is a
function whose return annotation is `tuple[...]` (or `Tuple[...]`, or plain `tuple`); such a
value should usually be a named record. The `Any` count adds each `Any` written in a parameter,
return or variable annotation. Both numbers should go down over time, never up.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple


class LooseCount(NamedTuple):
    """How many loose values a package tree holds."""

    tuple_returns: int  # functions annotated to return a bare tuple
    any_annotations: int  # occurrences of `Any` in annotations


def _is_bare_tuple(annotation: ast.expr) -> bool:
    text = ast.unparse(annotation)
    return text.startswith(("tuple[", "Tuple[")) or text == "tuple"


def count_file(source: str) -> LooseCount:
    """The loose-value count of one module's source text."""
    tuples = anys = 0
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.returns is not None
        ):
            tuples += _is_bare_tuple(node.returns)
            anys += ast.unparse(node.returns).count("Any")
        elif (
            isinstance(node, (ast.arg, ast.AnnAssign))
            and node.annotation is not None
        ):
            anys += ast.unparse(node.annotation).count("Any")
    return LooseCount(tuples, anys)


def count_tree(root: Path) -> LooseCount:
    """The loose-value count summed over every `.py` file under `root`."""
    tuples = anys = 0
    for path in root.rglob("*.py"):
        count = count_file(path.read_text())
        tuples += count.tuple_returns
        anys += count.any_annotations
    return LooseCount(tuples, anys)


def main(argv: Sequence[str] | None = None) -> None:
    """Print the loose-value count of the package tree named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "root", type=Path, help="package folder, e.g. gpu_parallel_kit"
    )
    count = count_tree(parser.parse_args(argv).root)
    print(
        f"bare-tuple returns: {count.tuple_returns}, Any in annotations: {count.any_annotations}"
    )


if __name__ == "__main__":
    main()
