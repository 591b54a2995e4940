"""The experiment a module of engine tests trains on, built once per module so its runs share one
data file, one fork server and its reference run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import small_experiment, small_mlp

# Where a module sets no EXPERIMENT: the small MLP, two epochs of four steps.
SMALL_MLP_TWO_EPOCHS: dict[str, Any] = dict(model=small_mlp, epochs=2, steps_per_epoch=4)


@pytest.fixture(scope="module")
def experiment(request):
    """`builders.small_experiment` with the test module's `EXPERIMENT` settings (model, epochs,
    steps per epoch, batch), or `SMALL_MLP_TWO_EPOCHS`."""
    settings = getattr(request.module, "EXPERIMENT", SMALL_MLP_TWO_EPOCHS)
    return small_experiment(**settings)
