"""`multiworker`: data parallelism over several processes or hosts
(tf.distribute's MultiWorkerMirroredStrategy; on JAX, Keras's `DataParallel` over one mesh of every
process's devices), locally in a private network or on a named cluster.

>>> exp.run(strategy="multiworker", workers=2, devices=1)
>>> exp.compare(["multiworker"], [1], workers=2, backend=["tensorflow", "jax"])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import GpkError, whole_number
from .processes import CLUSTER, WORKERS
from .record import GridCell, Strategy

if TYPE_CHECKING:
    from ..runs.description.run_spec import RunSpec

# MultiWorkerMirroredStrategy's collective implementations: ring (gRPC) or NCCL on GPUs.
MULTIWORKER_ALL_REDUCE = ("auto", "ring", "nccl")


# Backends whose multi-worker runs train with Keras's own fit (JAX); TensorFlow's need the
# kit's explicit loop.
FIT_ON = frozenset({"jax"})

MULTIWORKER_OPTIONS = (WORKERS, CLUSTER)


def multiworker_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A named cluster (already loaded by the caller) decides the worker count; locally 2."""
    cluster, workers = options.get("cluster"), options.get("workers")
    if cluster is not None:
        return {"cluster": cluster, "workers": len(cluster.workers) if workers is None else workers}
    return {"workers": 2 if workers is None else workers}


def check_multiworker(spec: RunSpec) -> None:
    w = spec.workers
    whole_number(w, "workers", hint="e.g. 2")
    if spec.cluster is not None and len(spec.cluster.workers) != w:
        raise GpkError(
            f"workers={w} but the cluster {spec.cluster.source or ''} lists "
            f"{len(spec.cluster.workers)}; drop workers= or make them agree"
        )
    if spec.all_reduce not in MULTIWORKER_ALL_REDUCE:
        raise GpkError(
            f"all_reduce={spec.all_reduce!r} is not available with strategy='multiworker'; "
            f"use one of {', '.join(MULTIWORKER_ALL_REDUCE)}"
        )
    if spec.mode != "explicit" and spec.backend not in FIT_ON:
        raise GpkError(
            f"mode={spec.mode!r} is not available with strategy='multiworker' (Keras's fit "
            "fails under MultiWorkerMirroredStrategy); use mode='explicit'"
        )
    # A named cluster's hosts plan their own devices; this check is theirs then.
    on_cpu = spec.devices.kind == "cpu" and spec.backend not in FIT_ON
    if on_cpu and spec.devices.count > 1 and spec.cluster is None:
        raise GpkError(
            f"devices={spec.devices.count} per worker needs GPUs: on the CPU "
            "MultiWorkerMirroredStrategy trains one replica per worker; use "
            f"workers={w * spec.devices.count}, devices=1 for {w * spec.devices.count} replicas"
        )


def _in_grid(cell: GridCell) -> bool:
    # One replica per worker on the CPU: the other counts would only fail.
    return cell.count == 1 or cell.device_kind() != "cpu"


def _label(spec: RunSpec) -> str:
    return f"{spec.strategy} {spec.workers} workers×{spec.devices.count}"


MULTIWORKER = Strategy(
    name="multiworker",
    predictor="gpu_parallel_kit.analysis.cost_model.calibrated_step:predict_data",
    summary="data parallelism over several processes or hosts",
    worker_classes={
        "tensorflow": "gpu_parallel_kit.worker.tensorflow.engines.multiworker:MultiWorkerEngine",
        "jax": "gpu_parallel_kit.worker.jax.strategies:DataParallel",
    },
    fit_on=FIT_ON,
    all_reduce=True,
    measures_comm=True,
    processes=True,
    default_mode="explicit",
    color="tab:green",
    columns=("workers",),
    options=MULTIWORKER_OPTIONS,
    plan=multiworker_options,
    check=check_multiworker,
    in_grid=_in_grid,
    label=_label,
    projector="gpu_parallel_kit.analysis.cost_model.strategy_projectors:project_data",
)
