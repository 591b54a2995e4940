"""Engines train a built model on one run's devices; one class per strategy."""

from __future__ import annotations

from ...runs.spec import RunSpec
from .base import Engine
from .data import DataParallelEngine
from .model import ModelParallelEngine
from .multiworker import MultiWorkerEngine
from .single import SingleDeviceEngine

ENGINES: dict[str, type[Engine]] = {
    "single": SingleDeviceEngine,
    "data": DataParallelEngine,
    "model": ModelParallelEngine,
    "multiworker": MultiWorkerEngine,
}


def make_engine(spec: RunSpec, device_names: tuple[str, ...]) -> Engine:
    return ENGINES[spec.strategy](spec, device_names)
