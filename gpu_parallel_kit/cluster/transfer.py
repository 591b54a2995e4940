"""A run's spec as one message for another host, and back into a spec there.

Locally a run's arrays travel as paths of memory-mapped `.npy` files, and a saved model as a path;
another host has neither, so the message carries the files' bytes and the receiving host writes
them to a folder of its own and points the spec there.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import cloudpickle

from ..runs.description.run_spec import RunSpec
from ..runs.description.sources import DataSource, ModelSource


def pack_job(spec: RunSpec) -> dict[str, Any]:
    """{"spec": bytes, "files": {path: bytes}} for every local file the spec refers to."""
    files = {path: Path(path).read_bytes() for path in _local_files(spec)}
    return {"spec": cloudpickle.dumps(spec), "files": files}


def unpack_job(job: dict[str, Any], folder: Path) -> RunSpec:
    """The spec of `job`, its files written under `folder` and the spec pointed at them."""
    spec = cloudpickle.loads(job["spec"])
    moved = {}
    for number, (path, content) in enumerate(job["files"].items()):
        target = folder / f"{number}-{Path(path).name}"
        target.write_bytes(content)
        moved[path] = str(target)
    return _relocated(spec, moved)


def _sources(value: Any) -> list[Any]:
    """Every DataSource and ModelSource reachable through dataclass fields of `value`."""
    if isinstance(value, DataSource | ModelSource):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [s for f in dataclasses.fields(value) for s in _sources(getattr(value, f.name))]
    return []


def _local_files(spec: RunSpec) -> list[str]:
    paths: list[str] = []
    for source in _sources(spec):
        if isinstance(source, DataSource):
            paths.extend(source.paths)
        elif source.kind == "file":
            paths.append(source.name)
    return list(dict.fromkeys(paths))


def _relocated(value: Any, moved: dict[str, str]) -> Any:
    if isinstance(value, DataSource):
        return dataclasses.replace(value, paths=tuple(moved.get(p, p) for p in value.paths))
    if isinstance(value, ModelSource):
        return dataclasses.replace(value, name=moved.get(value.name, value.name))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            current = getattr(value, f.name)
            updated = _relocated(current, moved)
            if updated is not current:
                changes[f.name] = updated
        return dataclasses.replace(value, **changes) if changes else value
    return value
