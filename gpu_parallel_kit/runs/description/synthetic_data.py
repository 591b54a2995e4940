"""Built-in synthetic data sets, generated with NumPy so no download is ever needed.

Labels come from a fixed random "teacher" so the task is learnable: loss goes down and accuracy
goes up, which keeps demos and convergence plots meaningful while costing nothing to ship.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ...errors import GpkError
from .nested_arrays import Samples


@dataclass(frozen=True)
class SyntheticSpec:
    """Shape of one built-in data set."""

    name: str
    input_shape: tuple[int, ...]  # per sample
    classes: int
    samples: int  # default size; GPK_QUICK=1 divides it by 4
    integer_inputs: int = 0  # > 0: inputs are token ids below this vocabulary size


SYNTHETIC_SETS = {
    "tabular": SyntheticSpec("tabular", (32,), classes=10, samples=16384),
    "images": SyntheticSpec("images", (32, 32, 3), classes=10, samples=4096),
    "tokens": SyntheticSpec("tokens", (32,), classes=4, samples=4096, integer_inputs=512),
}


def quick_mode() -> bool:
    """GPK_QUICK=1 shrinks demos and notebooks to a CI-sized run."""
    return os.environ.get("GPK_QUICK", "").strip() not in ("", "0", "false", "no")


def synthetic_spec(name: str) -> SyntheticSpec:
    try:
        return SYNTHETIC_SETS[name]
    except KeyError:
        names = ", ".join(sorted(SYNTHETIC_SETS))
        raise GpkError(f"data={name!r} is not a built-in data set; use one of {names}") from None


def default_samples(name: str) -> int:
    spec = synthetic_spec(name)
    return spec.samples // 4 if quick_mode() else spec.samples


def make_synthetic(name: str, samples: int, seed: int = 0) -> Samples:
    """Inputs and integer class labels for a built-in data set, the same for the same seed."""
    spec = synthetic_spec(name)
    rng = np.random.default_rng(seed)
    if spec.integer_inputs:
        x = rng.integers(0, spec.integer_inputs, size=(samples, *spec.input_shape), dtype=np.int32)
        features = np.stack([np.bincount(row % spec.classes, minlength=spec.classes) for row in x])
    else:
        x = rng.standard_normal((samples, *spec.input_shape), dtype=np.float32)
        features = x.reshape(samples, -1)
    teacher = np.random.default_rng(seed + 1).standard_normal((features.shape[1], spec.classes))
    y = np.argmax(features.astype(np.float32) @ teacher.astype(np.float32), axis=1)
    return Samples(x, y.astype(np.int32))
