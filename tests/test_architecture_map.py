"""docs/ARCHITECTURE.md names every module, names no module that is gone, and says of each what
its docstring says.

The map gives one line per module, grouped by room, each starting with the module's path within
the package (`runs/scheduling/training_gate.py`), written from the docstrings by
`docs/architecture_map.py`. A module added without its line, a line left for a module that is
gone, or a docstring changed without the page fails here.
"""

from __future__ import annotations

import difflib
import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).parent.parent
PACKAGE = ROOT / "gpu_parallel_kit"
MAP = ROOT / "docs" / "ARCHITECTURE.md"
MAP_LINE = re.compile(r"^- `([\w/]+\.py)`", re.MULTILINE)
_SPEC = importlib.util.spec_from_file_location(
    "architecture_map", ROOT / "docs" / "architecture_map.py"
)
architecture_map = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(architecture_map)


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


def test_the_module_list_is_the_one_the_docstrings_give():
    on_page = architecture_map.page_list(MAP.read_text())
    from_code = architecture_map.module_list()
    changed = difflib.unified_diff(
        on_page.splitlines(), from_code.splitlines(), "the page", "the docstrings", lineterm="", n=0
    )
    lines = [line for line in changed if line[:1] in "-+" and line[:3] not in ("---", "+++")]
    assert not lines, (
        "docs/ARCHITECTURE.md's module list and the modules' docstrings differ; run "
        "`python docs/architecture_map.py --write` and commit the page:\n" + "\n".join(lines[:20])
    )


def test_a_line_is_the_first_sentence_of_the_first_paragraph():
    first = architecture_map.first_sentence
    paragraph = architecture_map.first_paragraph
    text = "What `tf.distribute` trains, e.g. data.\nPlain data, no JAX. Not this.\n\nNor this."
    assert (
        paragraph(text) == "What `tf.distribute` trains, e.g. data. Plain data, no JAX. Not this."
    )
    assert first(paragraph(text)) == "What `tf.distribute` trains, e.g. data."
    assert first("Split `a. B` in two (e.g. K stages).") == "Split `a. B` in two (e.g. K stages)."


def test_the_list_is_written_between_the_markers_and_nowhere_else():
    page = (
        f"# Top\n\nProse.\n\n{architecture_map.BEGIN}\n\nold\n\n{architecture_map.END}\n\nMore.\n"
    )
    written = architecture_map.with_module_list(page, "### Room\n\n- `a.py`: A.\n")
    assert written == (
        f"# Top\n\nProse.\n\n{architecture_map.BEGIN}\n\n### Room\n\n- `a.py`: A.\n\n"
        f"{architecture_map.END}\n\nMore.\n"
    )
    assert architecture_map.page_list(written) == "### Room\n\n- `a.py`: A.\n"
