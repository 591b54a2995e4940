"""`single`: the model on one device, the baseline every speedup is measured against.

>>> exp.run(strategy="single")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import GpkError
from .record import GridCell, Strategy

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec


def _check(spec: RunSpec) -> None:
    if spec.devices.count != 1:
        raise GpkError(
            f"strategy='single' runs on one device, not {spec.devices.count}; "
            "use devices=1, or strategy='data' for several"
        )


def _one_device(cell: GridCell) -> bool:
    return cell.count == 1


SINGLE = Strategy(
    name="single",
    predictor="gpu_parallel_kit.analysis.cost_model.calibrated_step:predict_single",
    summary="the model on one device: the baseline of every speedup",
    worker_classes={
        "tensorflow": "gpu_parallel_kit.worker.tensorflow.engines.single:SingleDeviceEngine",
        "jax": "gpu_parallel_kit.worker.jax.strategies:SingleDevice",
    },
    fit_on=frozenset({"tensorflow", "jax"}),
    baseline=True,
    one_device=True,
    color="tab:gray",
    check=_check,
    in_grid=_one_device,
)
