"""Cost model of tensor parallelism: sharded layers' compute split, activations all-reduced.

Pure Python, modelled, never measured (notation of `step_time_model.py`). Over M devices on the
model axis and D data replicas, the share σ of the compute that sharded layers do is split M
ways, and each activation all-reduce of the layout's `collectives` (taken from a measured tensor
run: the cost model has no graph of its own) sits on the critical path::

    T  = (f + b) · G/D · (σ/M + 1 - σ) + Σ_c C(a_c · G/D, M) + C(S_D, D)

Weights on the data axis too, and counted compute: `docs/projection.md`, "The model, in formulas".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ...errors import GpkError
from ...runs.results.run_result import RunResult
from .hardware_presets import Interconnect
from .measured_inputs import sharded_parameter_share
from .step_time_model import Prediction, Workload, check_devices, make_prediction, ring_all_reduce_s

ACTIVATION_BYTES = 4  # float32 activations


def tensor_parallel(
    workload: Workload,
    devices: int,
    link: Interconnect,
    *,
    global_batch: float,
    collective_bytes_per_sample: tuple[float, ...],
    sharded_share: float = 1.0,
    data: int = 1,
    gathered_share: float = 0.0,
) -> Prediction:
    """`devices` = D·M, the model axis M = devices / data; see the module's formula.
    `gathered_share` of each device's weight bytes is on the data axis too (a model's own
    layout): gathered for the forward and the backward and reduce-scattered, not all-reduced."""
    check_devices(devices)
    if data < 1 or devices % data:
        raise GpkError(f"data={data} does not divide devices={devices}; use a divisor")
    if not 0.0 <= sharded_share <= 1.0:
        raise GpkError(f"sharded_share={sharded_share} is not a share; give 0 to 1")
    model = devices // data
    share = global_batch / data
    per_sample = workload.forward_s + workload.backward_s
    compute = per_sample * share * (sharded_share / model + 1.0 - sharded_share)
    activations = [ring_all_reduce_s(a * share, model, link) for a in collective_bytes_per_sample]
    held = workload.parameter_bytes * (sharded_share / model + 1.0 - sharded_share)
    gathered, gradient_bytes = held * gathered_share, held * (1.0 - gathered_share)
    # An all-gather or a reduce-scatter is half a ring all-reduce: three of them per step.
    gradients = ring_all_reduce_s(gradient_bytes, data, link) + (
        1.5 * ring_all_reduce_s(gathered, data, link) if gathered else 0.0
    )
    comm = math.fsum(activations) + gradients
    moved = (
        math.fsum(2 * (model - 1) * a * share for a in collective_bytes_per_sample) * data
        + (data - 1) * (2 * gradient_bytes + 3 * gathered) * model
    )
    return make_prediction(
        workload,
        "tensor",
        devices,
        global_batch,
        compute + comm,
        compute=compute,
        comm=comm,
        moved=moved,
    )


def tensor_predictions(
    workload_at: Callable[[float], Workload],
    runs: Sequence[RunResult],
    counts: Sequence[int],
    link: Interconnect,
    batch_of: Callable[[int], int],
) -> list[tuple[Prediction, str, str, str]]:
    """(prediction, key, note, mesh) per count above one, from the experiment's first finished
    tensor-parallel run; none without such a run. `workload_at(samples)` is one device's
    workload when it computes that many samples' work in one step."""
    measured = next((r for r in runs if r.ok and r.extra.get("collectives")), None)
    if measured is None:
        return []
    per_sample = tuple(
        ACTIVATION_BYTES * float(c["elements_per_sample"]) for c in measured.extra["collectives"]
    )
    sharded = sharded_parameter_share(measured)
    gathered = _data_axis_share(measured)
    # A layout with weights on the data axis (a model's own) keeps the measured data axis.
    data = int(str(measured.mesh or "1x1").split("x")[0]) if gathered else 1
    note = (
        f"{len(per_sample)} activation all-reduces per step from run {measured.run_id}'s layout; "
        f"{sharded:.0%} of the parameters sharded, taken as the share of compute split over the "
        "model axis"
    )
    if gathered:
        note += f"; {gathered:.0%} on the data axis, gathered twice and reduce-scattered"
    predictions = []
    for n in (n for n in counts if n > 1):
        batch, d = batch_of(n), data if n % data == 0 and n > data else 1
        m = n // d
        p = tensor_parallel(
            workload_at(batch / d * (sharded / m + 1.0 - sharded)),  # one device's share
            n,
            link,
            global_batch=batch,
            collective_bytes_per_sample=per_sample,
            sharded_share=sharded,
            data=d,
            gathered_share=gathered if d > 1 else 0.0,
        )
        predictions.append((p, f"tensor-{n}", note, f"{d}x{m}"))
    return predictions


def _data_axis_share(run: RunResult) -> float:
    """The share of a tensor-parallel run's weight elements its layout put on the data axis."""
    total = gathered = 0
    for placement in run.extra.get("layout", []):
        size = math.prod(placement["shape"]) if placement["shape"] else 1
        total += size
        gathered += size if "batch" in placement["axes"] else 0
    return gathered / total if total else 0.0
