"""Follow one parameter from a function through the package's modules, as the source passes it.

    python docs/parameter_path.py gpu_parallel_kit.planning.search:search gpus
    python docs/parameter_path.py gpu_parallel_kit.planning.search:search --calls

From the function, every call that passes the parameter (or a name bound to it by a plain
assignment) as an argument is followed into the called function, under the name its parameter
there has, depth first, each function and parameter once. Calls are resolved by the module's
own names: its functions and classes, what it imports, and `self.` methods of its class. The
output is each module the value enters, in the order of the calls that carry it there, and
three counts: the calls that carry it into another module, the folders of the modules it
enters, and the times it enters a module it had been in before. A static reading: a value passed through a container, a
callback or a method of another object is not followed. With `--calls`, every call the
function makes is followed, whatever it passes: the modules a call from it goes through.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path.cwd()  # run from the repository's root
PACKAGE = "gpu_parallel_kit"


@dataclass
class Module:
    """One module's functions (by name and by `Class.method`) and imported names."""

    name: str
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # alias: (module, name)
    modules: dict[str, str] = field(default_factory=dict)  # alias: module


def read_modules() -> dict[str, Module]:
    """Every module of the package, read."""
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        module = Module(name)
        tree = ast.parse(path.read_text())
        package = name if parts[-1] == "__init__" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(package, node.module, node.level)
                for alias in node.names:
                    module.imported[alias.asname or alias.name] = (
                        base,
                        alias.name,
                    )
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    module.modules[alias.asname or alias.name] = alias.name
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                module.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                module.classes[node.name] = node
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        module.functions[f"{node.name}.{item.name}"] = item
        found[name] = module
    return found


def _absolute(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    base = package.split(".")
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, *([module] if module else [])])


def resolve(
    modules: dict[str, Module],
    module: Module,
    owner: str | None,
    call: ast.Call,
) -> tuple[Module, str] | None:
    """The module and function name a call reaches, or None outside the package."""
    target = call.func
    if isinstance(target, ast.Name):
        name = target.id
        if name in module.functions:
            return module, name
        if name in module.classes:
            return module, f"{name}.__init__"
        if name in module.imported:
            source, original = module.imported[name]
            if f"{source}.{original}" in modules:  # a module imported by name
                return None
            home = modules.get(source)
            if home is None:
                return None
            if original in home.functions:
                return home, original
            if original in home.classes:
                return home, f"{original}.__init__"
            if original in home.imported:  # re-exported
                return resolve(
                    modules, home, None, ast.Call(ast.Name(original), [], [])
                )
        return None
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
        base = target.value.id
        if base == "self" and owner:
            key = f"{owner}.{target.attr}"
            return (module, key) if key in module.functions else None
        source = module.modules.get(base)
        if source is None and base in module.imported:
            source = ".".join(module.imported[base])
        home = modules.get(source or "")
        if home is not None and target.attr in home.functions:
            return home, target.attr
    return None


def follow(
    modules: dict[str, Module], start: str, parameter: str | None
) -> list[str]:
    """The modules the value enters, in order, the first being the start's (`parameter` None:
    every call is followed)."""
    module_name, _, function = start.partition(":")
    visits = [module_name]
    seen: set[tuple[str, str, str]] = set()

    def walk(module: Module, function: str, name: str | None) -> None:
        key = (module.name, function, name)
        if key in seen or function not in module.functions:
            return
        seen.add(key)
        node = module.functions[function]
        owner = function.rpartition(".")[0] or None
        held = {name} if name is not None else set()
        for statement in ast.walk(node):
            if (
                isinstance(statement, ast.Assign)
                and isinstance(statement.value, ast.Name)
                and statement.value.id in held
            ):
                held |= {
                    t.id for t in statement.targets if isinstance(t, ast.Name)
                }
        calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
        for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
            passed = _passed(call, held) if name is not None else [None]
            if not passed:
                continue
            reached = resolve(modules, module, owner, call)
            if reached is None:
                continue
            home, callee = reached
            if callee not in home.functions:
                continue
            names = _parameters(home.functions[callee], callee)
            for where in passed:
                target = names.get(where) if where is not None else None
                if (where is not None and target is None) or (
                    home.name,
                    callee,
                    target,
                ) in seen:
                    continue
                if home.name != module.name:
                    visits.append(home.name)
                walk(home, callee, target)

    walk(modules[module_name], function, parameter)
    return visits


def _passed(call: ast.Call, held: set[str]) -> list[int | str | None]:
    found: list[int | str | None] = []
    for index, argument in enumerate(call.args):
        if isinstance(argument, ast.Name) and argument.id in held:
            found.append(index)
    for keyword in call.keywords:
        if (
            isinstance(keyword.value, ast.Name)
            and keyword.value.id in held
            and keyword.arg
        ):
            found.append(keyword.arg)
    return found


def _parameters(node: ast.FunctionDef, name: str) -> dict[int | str, str]:
    arguments = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    if "." in name and arguments and arguments[0] in ("self", "cls"):
        arguments = arguments[1:]
    found: dict[int | str, str] = dict(enumerate(arguments))
    found.update({a: a for a in arguments})
    found.update({a.arg: a.arg for a in node.args.kwonlyargs})
    return found


def main(start: str, parameter: str) -> None:
    visits = follow(
        read_modules(), start, None if parameter == "--calls" else parameter
    )
    entered = len(visits) - 1
    folders = {name.rpartition(".")[0] for name in visits}
    returns = sum(1 for i, name in enumerate(visits) if name in visits[:i])
    for name in visits:
        print(name.removeprefix(f"{PACKAGE}."))
    print(
        f"{parameter.removeprefix('--')}: enters a module {entered} times, in {len(folders)} folders; comes back "
        f"to a module it had left {returns} times"
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
