"""`data`: one replica of the model per device, the global batch split over them and the
gradients all-reduced every step (tf.distribute's MirroredStrategy; Keras's `DataParallel` on JAX).

>>> exp.run(strategy="data", devices=4)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .long_sequences import LONG_SEQUENCE_OPTIONS, check_sequence_split, sequence_options
from .plan_axes import DATA as DATA_AXIS
from .processes import CLUSTER, WORKERS, workers_option
from .record import Strategy

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec


def data_options(options: Mapping[str, Any]) -> dict[str, Any]:
    return {**workers_option(options), **sequence_options(options)}


def check_data(spec: RunSpec) -> None:
    """Context parallelism splits the replicas' devices; nothing else to check here."""
    check_sequence_split(spec, spec.replicas, 1)


DATA = Strategy(
    name="data",
    predictor="gpu_parallel_kit.analysis.cost_model.calibrated_step:predict_data",
    summary="a replica per device, the batch split, gradients all-reduced every step",
    worker_classes={
        "tensorflow": "gpu_parallel_kit.worker.tensorflow.engines.data:DataParallelEngine",
        "jax": "gpu_parallel_kit.worker.jax.strategies:DataParallel",
    },
    fit_on=frozenset({"tensorflow", "jax"}),
    all_reduce=True,
    measures_comm=True,
    color="tab:blue",
    options=(WORKERS, CLUSTER, *LONG_SEQUENCE_OPTIONS),
    plan=data_options,
    check=check_data,
    over_processes=frozenset({"jax"}),
    projector="gpu_parallel_kit.analysis.cost_model.strategy_projectors:project_data",
    plan_axis=DATA_AXIS,
    plan_sharding="none",
)
