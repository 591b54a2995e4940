"""The kit's extras as pyproject.toml declares them, with the kit's own extras inside them
expanded, and whether an environment holds what one of them installs.

Pure Python (tomllib, packaging, importlib.metadata): no TensorFlow or JAX import.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = pathlib.Path(__file__).parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME = canonicalize_name(PROJECT["name"])


def requirements(*extras: str) -> list[Requirement]:
    """The requirements `pip install ".[extras]"` adds to the kit's own dependencies, with
    `gpu_parallel_kit[...]` inside an extra replaced by what those extras list."""
    found: list[Requirement] = []
    for extra in extras:
        for line in PROJECT["optional-dependencies"][extra]:
            requirement = Requirement(line)
            if canonicalize_name(requirement.name) == NAME:
                found += requirements(*sorted(requirement.extras))
            else:
                found.append(requirement)
    return found


def names(*extras: str) -> set[str]:
    """The canonical names of the distributions `requirements(*extras)` lists."""
    return {canonicalize_name(r.name) for r in requirements(*extras)}


def is_installed(requirement: Requirement) -> bool:
    """Whether this environment holds a distribution that meets `requirement`."""
    try:
        version = importlib.metadata.version(requirement.name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return requirement.specifier.contains(version, prereleases=True)


def installed_but(extra: str, name: str) -> bool:
    """Whether everything `extra` installs is here except, perhaps, the distribution `name`: an
    environment made with `pip install ".[extra]"` that has lost that one."""
    name = canonicalize_name(name)
    return all(is_installed(r) for r in requirements(extra) if canonicalize_name(r.name) != name)
