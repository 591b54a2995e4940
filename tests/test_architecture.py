"""The layout docs/ARCHITECTURE.md describes, checked on the source: no import cycle, each room
importing only the rooms below it, TensorFlow in the worker alone, matplotlib in plots alone.

Every `import` and `from` statement counts, at any depth (inside functions too), except those
under `if TYPE_CHECKING:`, which never run.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pytest

PACKAGE = pathlib.Path(__file__).parent.parent / "gpu_parallel_kit"
NAME = PACKAGE.name

# Each room and the rooms it may import (besides itself). A room is a subpackage, or a module at
# the top of the package. Mirrors the table in docs/ARCHITECTURE.md.
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "version": set(),
    "pipeline": {"errors"},
    # The backend registry: records of plain values, entry points and servers by path.
    "backends": {"errors"},
    "sharding": set(),
    # The strategy registry: records of plain values, worker classes and projectors by path.
    "strategies": {"errors", "pipeline", "sharding"},
    # runs/ holds four rooms: a run's results at the bottom, the child processes that report
    # them, a run's description (device discovery asks a child), and a comparison's scheduling.
    "runs": set(),
    # run_result draws RunResult.plot_timeline() with plots.timeline, which imports no room.
    "runs.results": {"errors", "strategies", "plots.timeline"},
    "runs.processes": {"errors", "backends", "strategies", "runs.results"},
    "runs.description": {"errors", "backends", "pipeline", "strategies", "runs.processes"},
    "runs.scheduling": {
        "errors",
        "backends",
        "strategies",
        "runs.description",
        "runs.processes",
        "runs.results",
    },
    # analysis/ holds two rooms: the tables read the cost model's rows (the speedup baseline,
    # what a projected row says of its compute); the cost model never reads a table.
    "analysis": set(),
    # The cost model splits a card's layers as the kit's own tensor layout does (`sharding`).
    # A calibration draws its curves with plots.calibration, which imports no room.
    "analysis.cost_model": {
        "plots.calibration",
        "errors",
        "backends",
        "pipeline",
        "sharding",
        "strategies",
        "runs.results",
    },
    "analysis.tables": {
        "errors",
        "backends",
        "pipeline",
        "strategies",
        "runs.description",
        "runs.results",
        "runs.scheduling",
        "analysis.cost_model",
    },
    "plots": {
        "errors",
        "backends",
        "strategies",
        "runs.description",
        "runs.results",
        "analysis.cost_model",
        "analysis.tables",
    },
    "cluster": {"errors", "runs.description", "runs.processes", "runs.results"},
    # The plan search's caller side: a sample's shapes, the count's child, the ranked plans.
    "planning": {
        "errors",
        "pipeline",
        "strategies",
        "runs.description",
        "runs.processes",
        "analysis.cost_model",
        "plots",
        "comparison",  # a plan's shape run here comes back as a Comparison
        "backends",  # which backend splits a plan's layers over a mesh
    },
    "worker": {
        "errors",
        "version",
        "backends",
        "strategies",
        "runs.description",
        "runs.processes",
        "runs.results",
        "runs.scheduling",
        "pipeline",
        "sharding",
        "cluster",
    },
    "runner": {
        "errors",
        "strategies",
        "runs.description",
        "runs.processes",
        "runs.results",
        "runs.scheduling",
        "cluster",
    },
    "store": {"errors", "runs.results", "runs.scheduling", "analysis.tables"},
    "report": {"runs.results", "analysis.tables", "plots"},
    "comparison": {
        "errors",
        "runs.results",
        "analysis.cost_model",
        "analysis.tables",
        "plots",
        "report",
    },
    "api": {
        "errors",
        "backends",
        "strategies",
        "runs.description",
        "runs.processes",
        "runs.results",
        "runs.scheduling",
        "cluster",
        "runner",
        "store",
        "comparison",
        "planning",
    },
    "options": {
        "errors",
        "strategies",
        "runs.description",
        "pipeline",
        "api",
        "comparison",
        "analysis.cost_model",
    },
    "cli": {
        "errors",
        "backends",
        "strategies",
        "runs.description",
        "runs.scheduling",
        "cluster",
        "analysis.cost_model",
        "analysis.tables",
        "store",
        "api",
        "comparison",
        "options",
        "planning",
    },
    "notebook": {
        "errors",
        "cluster",
        "strategies",
        "pipeline",
        "runs.description",
        "runs.processes",
        "runs.results",
        "analysis.tables",
        "plots",
        "store",
        "api",
        "comparison",
        "options",
        "planning",
    },
    "": {
        "errors",
        "version",
        "runs.scheduling",
        "store",
        "api",
        "comparison",
        "notebook",
        "analysis.cost_model",
        "planning",
    },
}
HEAVY = ("tensorflow", "keras", "jax")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module or package, dotted
    line: int
    in_function: bool  # made when a function runs, not when the module is imported


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = modules()


def imports(module: str) -> Iterator[Import]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    yield from _walk(ast.parse(path.read_text()), module, package, in_function=False)


def _walk(node: ast.AST, module: str, package: str, in_function: bool) -> Iterator[Import]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            yield from (i for n in child.orelse for i in _walk(n, module, package, in_function))
            continue
        if isinstance(child, ast.Import):
            for alias in child.names:
                yield Import(module, alias.name, child.lineno, in_function)
        elif isinstance(child, ast.ImportFrom):
            base = _absolute(child, package)
            for alias in child.names:
                candidate = f"{base}.{alias.name}"
                yield Import(
                    module, candidate if candidate in MODULES else base, child.lineno, in_function
                )
        inner = in_function or isinstance(
            child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
        )
        yield from _walk(child, module, package, inner)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def internal_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for module in MODULES:
        for found in imports(module):
            target = found.target
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != module and target.startswith(NAME):
                graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[list[str], list[str]]]:
    """Each circle of modules that import each other (a strongly connected component), with
    its shortest cycle through its first module, as a path that returns to its start."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [(c, _path_through(graph, set(c))) for c in components]


def _path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest cycle from the component's first module back to itself."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    following.append(nxt)
        frontier = following
    return sorted(component)


# Folders whose subpackages are rooms of their own ("analysis.tables", "runs.scheduling").
NESTED_ROOMS = ("runs", "analysis")


def room(module: str) -> str:
    """The room a module lives in: its subpackage (a subpackage's own under `NESTED_ROOMS`), its
    own name at the top, "" for the package."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in NESTED_ROOMS and (PACKAGE / parts[1] / parts[2]).is_dir():
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else ""


def test_the_cycle_finder_names_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [(["a", "b", "c"], ["a", "b", "c", "a"])]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules():
    found = cycles(internal_graph())
    assert not found, "import cycles: " + "; ".join(
        f"{len(members)} modules ({', '.join(members)}), e.g. " + " -> ".join(path)
        for members, path in found
    )


def test_every_room_imports_only_the_rooms_below_it():
    wrong = []
    graph = internal_graph()
    for module, targets in sorted(graph.items()):
        own = room(module)
        for target in sorted(targets):
            other = room(target)
            allowed = MAY_IMPORT[own]
            if other != own and other not in allowed and target.partition(".")[2] not in allowed:
                wrong.append(f"{module} imports {target} ({own or 'the package'} -> {other})")
    assert not wrong, "\n".join(wrong)


def test_every_room_is_described():
    assert {room(m) for m in MODULES} <= set(MAY_IMPORT)


def _third_party(prefixes: tuple[str, ...], where, module_level_only: bool) -> list[str]:
    found = []
    for module in sorted(MODULES):
        if not where(module):
            continue
        for i in imports(module):
            if module_level_only and i.in_function:
                continue
            if i.target.split(".")[0] in prefixes:
                found.append(f"{module}:{i.line} imports {i.target}")
    return found


def test_the_caller_side_never_imports_tensorflow_or_keras_at_module_level():
    outside_worker = lambda m: room(m) != "worker"  # noqa: E731
    assert _third_party(HEAVY, outside_worker, module_level_only=True) == []


@pytest.mark.parametrize(
    "name", ["analysis", "analysis.cost_model", "analysis.tables", "pipeline", "plots", "sharding"]
)
def test_pure_rooms_never_import_tensorflow(name):
    assert _third_party(HEAVY, lambda m: room(m) == name, module_level_only=False) == []


@pytest.mark.parametrize(
    "name", ["analysis", "analysis.cost_model", "analysis.tables", "pipeline", "sharding"]
)
def test_analysis_and_pipeline_never_import_matplotlib(name):
    found = _third_party(("matplotlib",), lambda m: room(m) == name, module_level_only=False)
    assert found == []


def test_every_entry_point_the_caller_names_exists():
    """The caller starts worker code by name (runs/processes/child_process.py); a rename must fail
    here, not in a child process. Read from the source: importing a worker module would import
    TensorFlow."""
    from gpu_parallel_kit.runs.processes.entry_points import ENTRIES

    for entry in ENTRIES:
        module, _, function = entry.partition(":")
        assert module in MODULES, entry
        defined = {
            node.name
            for node in ast.parse(MODULES[module].read_text()).body
            if isinstance(node, ast.FunctionDef)
        }
        assert function in defined, entry


# Where knowledge of one strategy may sit: its record in the registry, and the per-backend
# strategy classes of the worker, which own their checks, layout and measurements.
STRATEGY_ROOMS = ("strategies",)
STRATEGY_MODULES: tuple[str, ...] = ()


def _strategy_names() -> set[str]:
    from gpu_parallel_kit.strategies import REGISTERED

    # Names the registry holds, and names a next strategy is likely to take.
    return {name for record in REGISTERED for name in record.names()} | {"fsdp", "zero"}


def _name_knowledge(tree: ast.AST, names: set[str]) -> Iterator[tuple[int, str]]:
    """Comparisons of a strategy's name with a literal, dicts keyed by strategy names, and
    tuples, lists or sets of two or more of them."""

    def literals(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and node.value in names:
            return [node.value]
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
        return []

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found = [name for side in (node.left, *node.comparators) for name in literals(side)]
            # "data" and "model" are also words for arrays and a mesh axis: a comparison counts
            # when it is about a strategy.
            if found and "strateg" in ast.unparse(node).lower():
                yield node.lineno, ast.unparse(node)[:80]
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            if sum(k in names for k in keys) >= 2:
                yield node.lineno, "a dict keyed by strategy names"
        elif isinstance(node, ast.Tuple | ast.List | ast.Set) and len(literals(node)) >= 2:
            yield node.lineno, f"a collection of strategy names: {ast.unparse(node)[:60]}"


def test_no_room_but_the_registry_knows_a_strategy_by_name():
    names = _strategy_names()
    found = []
    for module, path in sorted(MODULES.items()):
        if room(module) in STRATEGY_ROOMS or module.partition(".")[2] in STRATEGY_MODULES:
            continue
        for line, what in _name_knowledge(ast.parse(path.read_text()), names):
            found.append(f"{module}:{line}: {what}")
    assert found == [], "ask the strategy's record instead:\n" + "\n".join(found)


def test_the_name_scan_finds_what_it_is_for():
    names = _strategy_names()
    source = """
if spec.strategy == "tensor": pass
colours = {"single": "grey", "data": "blue"}
FIT = ("single", "data")
if axes[0] == "model": pass
"""
    found = [what for _, what in _name_knowledge(ast.parse(source), names)]
    assert len(found) == 3 and "collection" in found[2]


# Where a backend or a pipeline schedule may be known by name: its record, and each backend's own
# worker folder (which knows the one backend it is).
BACKEND_HOMES = ("backends", "worker.tensorflow", "worker.jax")
SCHEDULE_HOMES = ("pipeline.schedules",)
# Where user input is parsed, a name may be compared (at most 3 backend and 2 schedule sites in
# the package, each record's own lookup included): module -> why. None yet outside the records.
BACKEND_PARSE_SITES: dict[str, str] = {}
SCHEDULE_PARSE_SITES: dict[str, str] = {}
# Modules allowed to read a strategy's name off a lookup: none; every room reads the record.
STRATEGY_NAMES_READ_OFF_LOOKUPS: set[str] = set()
# The registries' lookups, whose `.attribute` on a literal name would smuggle the name past.
LOOKUPS = {
    "backend",
    "backend_record",
    "lookup",
    "of_row",
    "strategy",
    "strategy_record",
    "schedule_record",
}


def _backend_names() -> set[str]:
    from gpu_parallel_kit.backends import names

    return set(names()) | {"torch"}  # and a next backend's likely name


def _schedule_names() -> set[str]:
    from gpu_parallel_kit.pipeline.schedules import SCHEDULES

    return set(SCHEDULES) | {"zb-v", "dualpipe"}


def _decided_by_name(tree: ast.AST, names: set[str]) -> Iterator[tuple[int, str]]:
    """Comparisons with a literal name (`== "jax"`, `in ("jax", ...)`), subscripts by one
    (`x["jax"]`, `x.get("jax")`), dicts keyed by them, and a lookup's attribute read off a literal
    name (`backend("jax").name`), which would carry the name past the rest of the scan."""

    def named(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(named(e) for e in node.elts)
        return False

    record_fields = {
        id(value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _called(node) in {"Strategy", "Backend"}
        for value in (k.value for k in node.keywords)
    }
    for node in ast.walk(tree):
        text = ast.unparse(node)[:80] if isinstance(node, ast.expr) else ""
        if (
            isinstance(node, ast.Compare)
            and any(named(side) for side in (node.left, *node.comparators))
            or isinstance(node, ast.Subscript)
            and named(node.slice)
        ):
            yield node.lineno, text
        elif isinstance(node, ast.Call) and _called(node) == "get" and node.args:
            if named(node.args[0]):
                yield node.lineno, text
        # A record's own per-backend fields (a strategy's `workers`) describe it; they decide
        # nothing by name.
        elif isinstance(node, ast.Dict) and id(node) not in record_fields:
            if any(named(key) for key in node.keys):
                yield node.lineno, f"a dict keyed by names: {text}"
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Call)
            and _called(node.value) in LOOKUPS
            and node.value.args
            and named(node.value.args[0])
        ):
            yield node.lineno, f"a name read off its record: {text}"


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _in(module: str, places: Iterable[str]) -> bool:
    inner = module.partition(".")[2]
    return any(inner == p or inner.startswith(f"{p}.") for p in places)


def _knowing(names: set[str], homes: Iterable[str], allowed: Iterable[str]) -> list[str]:
    found = []
    for module, path in sorted(MODULES.items()):
        if _in(module, homes) or _in(module, allowed):
            continue
        for line, what in _decided_by_name(ast.parse(path.read_text()), names):
            found.append(f"{module}:{line}: {what}")
    return found


def test_no_room_but_the_backend_records_knows_a_backend_by_name():
    assert len(BACKEND_PARSE_SITES) <= 2  # the record's own lookup is the third
    found = _knowing(_backend_names(), BACKEND_HOMES, BACKEND_PARSE_SITES)
    assert found == [], "ask the backend's record instead:\n" + "\n".join(found)


def test_no_module_but_the_schedule_table_knows_a_schedule_by_name():
    assert len(SCHEDULE_PARSE_SITES) <= 2
    found = _knowing(_schedule_names(), SCHEDULE_HOMES, SCHEDULE_PARSE_SITES)
    assert found == [], "ask the schedule's record instead:\n" + "\n".join(found)


def test_no_module_reads_a_strategy_off_its_record_by_a_literal_name():
    found = _knowing(_strategy_names(), STRATEGY_ROOMS, STRATEGY_NAMES_READ_OFF_LOOKUPS)
    smuggled = [f for f in found if "read off its record" in f]
    assert smuggled == [], "ask the record for what it says instead:\n" + "\n".join(smuggled)


def test_the_backend_and_schedule_scan_finds_what_it_is_for():
    source = """
if spec.backend == "jax": pass
if backend in ("tensorflow", "torch"): pass
if schedule != "interleaved": pass
tag = TAGS["jax"]
tag = TAGS.get("tensorflow")
TAGS = {"tensorflow": "tf", "jax": "jax"}
label = backend("jax").name
name = strategy_record("pipeline").name
fine = Strategy(name="x", workers={"jax": "m:C"})
if axes[0] == "model": pass
"""
    names = _backend_names() | _schedule_names() | {"pipeline"}
    found = [what for _, what in _decided_by_name(ast.parse(source), names)]
    assert len(found) == 8, found
    assert "read off its record" in found[-1] and "dict keyed" in found[-3]
