"""Each backend's code in its own folder: TensorFlow is imported only under `worker/tensorflow/`,
JAX only under `worker/jax/`, and the worker's root, which both backends share, neither imports
a backend nor decides by a backend's name.

Every `import` and `from` statement counts, at any depth (inside functions too), except those
under `if TYPE_CHECKING:`, which never run. Keras itself is backend-neutral and may be imported
anywhere the room rules allow (`tests/test_architecture.py`).
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

PACKAGE = pathlib.Path(__file__).parent.parent / "gpu_parallel_kit"

# Each backend's libraries, and the one folder that may import them.
HOMES = {
    "tensorflow": ("tensorflow", "tf_keras"),
    "jax": ("jax", "jaxlib"),
}
BACKEND_NAMES = frozenset(HOMES)

# Modules outside a backend's folder that import it, each with its reason. A new one fails the
# test until it is listed here with why it cannot live in the backend's folder.
EXCEPTIONS: dict[str, str] = {}


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = modules()


def imported(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """Every absolute module name `tree` imports, with its line, at any depth, leaving out the
    imports under `if TYPE_CHECKING:`. Relative imports name the kit's own modules: left out."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for node in child.orelse:
                yield from imported(ast.Module(body=[node], type_ignores=[]))
            continue
        if isinstance(child, ast.Import):
            yield from ((alias.name, child.lineno) for alias in child.names)
        elif isinstance(child, ast.ImportFrom) and not child.level and child.module:
            yield child.module, child.lineno
        yield from imported(child)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def home_of(module: str) -> str | None:
    """The backend whose folder holds `module`, or None outside both."""
    parts = module.split(".")
    if parts[1:2] == ["worker"] and len(parts) > 2 and parts[2] in HOMES:
        return parts[2]
    return None


def backend_imports_outside_their_folder() -> list[str]:
    found = []
    for module, path in MODULES.items():
        for name, line in imported(ast.parse(path.read_text())):
            backend = next((b for b, libs in HOMES.items() if name.split(".")[0] in libs), None)
            if backend and home_of(module) != backend and module not in EXCEPTIONS:
                found.append(f"{module}:{line} imports {name} outside worker/{backend}/")
    return found


def test_each_backend_is_imported_only_in_its_own_folder():
    assert backend_imports_outside_their_folder() == []


def test_the_scan_sees_imports_at_any_depth_but_not_under_type_checking():
    tree = ast.parse(
        "import os\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import jax\n"
        "else:\n"
        "    import tf_keras\n"
        "def f():\n"
        "    class C:\n"
        "        def g(self):\n"
        "            from tensorflow.python import ops\n"
        "from . import sibling\n"
    )
    seen = dict(imported(tree))
    assert seen == {"os": 1, "typing": 2, "tf_keras": 6, "tensorflow.python": 10}


def test_every_listed_exception_is_still_needed():
    for module in EXCEPTIONS:
        names = {n.split(".")[0] for n, _ in imported(ast.parse(MODULES[module].read_text()))}
        assert names & {lib for libs in HOMES.values() for lib in libs}, module


def _backend_name_comparisons(tree: ast.AST) -> Iterator[int]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for part in (node.left, *node.comparators):
            values = part.elts if isinstance(part, ast.Tuple | ast.List | ast.Set) else [part]
            if any(isinstance(v, ast.Constant) and v.value in BACKEND_NAMES for v in values):
                yield node.lineno
                break


def test_the_worker_outside_the_backend_folders_never_compares_a_backend_name():
    """The shared worker chooses a backend's code by calling into its folder, not by testing
    `keras.backend.backend() == "jax"`."""
    found = [
        f"{module}:{line}"
        for module, path in MODULES.items()
        if module.startswith("gpu_parallel_kit.worker") and home_of(module) is None
        for line in _backend_name_comparisons(ast.parse(path.read_text()))
    ]
    assert found == []
