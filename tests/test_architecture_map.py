"""docs/ARCHITECTURE.md names every module, and names no module that is gone.

The map gives one line per module, grouped by room, each starting with the module's path within
the package (`runs/scheduling/training_gate.py`). A module added without its line, or a line
left for a module that is gone, fails here.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).parent.parent
PACKAGE = ROOT / "gpu_parallel_kit"
MAP = ROOT / "docs" / "ARCHITECTURE.md"
MAP_LINE = re.compile(r"^- `([\w/]+\.py)`", re.MULTILINE)


def package_modules() -> set[str]:
    return {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
    }


def mapped_modules() -> list[str]:
    return MAP_LINE.findall(MAP.read_text())


def test_every_module_has_one_line_on_the_map():
    mapped = mapped_modules()
    assert len(mapped) == len(set(mapped)), "a module is on the map twice"
    missing = sorted(package_modules() - set(mapped))
    assert not missing, f"modules without a line in docs/ARCHITECTURE.md: {missing}"


def test_the_map_names_no_module_that_is_gone():
    gone = sorted(set(mapped_modules()) - package_modules())
    assert not gone, f"docs/ARCHITECTURE.md names modules that do not exist: {gone}"


def test_the_map_reader_sees_lines_and_only_lines():
    sample = "- `runs/spec.py`: one run.\n  - `not/a_line.py`\n- `api.py`: the API.\n"
    assert MAP_LINE.findall(sample) == ["runs/spec.py", "api.py"]
