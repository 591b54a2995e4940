"""Cost model: step time, speedup and efficiency of a workload on hardware the user does not have.

Pure Python, no TensorFlow. Everything here is *modelled*, never measured;
`analysis/cost_model/projected_rows.py` turns measured runs into a `Workload` and predictions back
into labelled rows. f and b are forward and backward seconds per sample on the target device (the
measured figures divided by `compute_scale`), S the gradient bytes per step, α and B a link's
latency and bandwidth (`hardware_presets.Interconnect`). Pipelines are replayed task by task
(`pipeline_replay.py`); tensor parallelism is modelled in `analysis/cost_model/tensor_cost.py`.

The formulas per strategy and what is not modelled: `docs/projection.md`, "The model, in formulas".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...errors import GpkError, whole_number
from ...pipeline.schedules import build_schedule
from .hardware_presets import Interconnect
from .pipeline_replay import PipelineTasks, ReplayedStep, replay, stage_work

DEFAULT_BACKWARD_RATIO = 2.0  # backward ≈ 2 × forward: two matrix products per forward one


@dataclass(frozen=True)
class Workload:
    """One model's training step reduced to per-sample compute and gradient bytes."""

    forward_s: float  # forward seconds per sample
    backward_s: float  # backward (and optimizer update) seconds per sample
    parameter_bytes: float  # trainable parameter bytes: what a data-parallel step all-reduces

    def __post_init__(self) -> None:
        for name in ("forward_s", "backward_s", "parameter_bytes"):
            _check_figure(name, getattr(self, name))

    @classmethod
    def from_step_time(
        cls,
        step_time_s: float,
        global_batch: int,
        parameter_bytes: float,
        backward_ratio: float = DEFAULT_BACKWARD_RATIO,
    ) -> Workload:
        """Split one measured step into forward and backward with backward = ratio × forward."""
        if global_batch < 1:
            raise GpkError(f"global_batch={global_batch} is too small; use 1 or more")
        _check_figure("backward_ratio", backward_ratio)
        forward = step_time_s / global_batch / (1.0 + backward_ratio)
        return cls(forward, forward * backward_ratio, parameter_bytes)

    def scaled(self, compute_scale: float) -> Workload:
        """The same work on a device `compute_scale` times faster."""
        if not (math.isfinite(compute_scale) and compute_scale > 0):
            raise GpkError(f"compute_scale={compute_scale} is not usable; give a number above 0")
        return replace(
            self,
            forward_s=self.forward_s / compute_scale,
            backward_s=self.backward_s / compute_scale,
        )


@dataclass(frozen=True)
class Partition:
    """A model cut into K pipeline stages: each stage's share of the work, what crosses each cut."""

    forward: tuple[float, ...]  # per stage: share of the forward time (sums to 1)
    backward: tuple[float, ...]  # per stage: share of the backward time (sums to 1)
    parameters: tuple[float, ...]  # per stage: share of the parameter bytes (sums to 1)
    cut_bytes: tuple[float, ...]  # per cut (K-1): activation bytes per sample, each direction

    def __post_init__(self) -> None:
        k = len(self.forward)
        if k < 1 or len(self.backward) != k or len(self.parameters) != k:
            raise GpkError(
                f"a partition needs one forward, backward and parameter share per stage; got "
                f"{len(self.forward)}, {len(self.backward)} and {len(self.parameters)}"
            )
        if len(self.cut_bytes) != k - 1:
            raise GpkError(f"{k} stages have {k - 1} cuts, not {len(self.cut_bytes)}")
        for name in ("forward", "backward", "parameters"):
            shares = getattr(self, name)
            for share in shares:
                _check_figure(f"{name} share", share)
            if not math.isclose(math.fsum(shares), 1.0, rel_tol=1e-6):
                raise GpkError(f"{name} shares {shares} sum to {math.fsum(shares):g}, not 1")
        for value in self.cut_bytes:
            _check_figure("cut bytes", value)

    @property
    def stages(self) -> int:
        return len(self.forward)

    @classmethod
    def equal(cls, stages: int, cut_bytes_per_sample: float = 0.0) -> Partition:
        """K stages with equal work and parameters, the same bytes across every cut."""
        if stages < 1:
            raise GpkError(f"stages={stages} is too few; use 1 or more")
        share = (1.0 / stages,) * stages
        return cls(share, share, share, (float(cut_bytes_per_sample),) * (stages - 1))


@dataclass(frozen=True)
class Prediction:
    """What the model predicts for one configuration; times in seconds per optimizer step."""

    strategy: str  # a strategy record's name
    devices: int  # N: all devices the step uses
    global_batch: float  # samples per optimizer step
    step_time_s: float
    compute_s: float  # compute on the busiest device (no communication, no idling)
    comm_time_s: float  # all communication of the step, hidden or not
    exposed_comm_s: float  # how much longer the step is than with free communication
    comm_bytes: float  # bytes moved between devices per step, summed over all links
    bubble_fraction: float  # share of device time not computing (idle or waiting on transfers)
    speedup: float  # throughput / single-device throughput of the same workload
    efficiency: float  # speedup / devices

    def __repr__(self) -> str:
        return (
            f"<Prediction {self.strategy}×{self.devices}: step {self.step_time_s:.4g} s, "
            f"comm {self.comm_time_s:.3g} s ({self.exposed_comm_s:.3g} s exposed), "
            f"speedup {self.speedup:.3g}, efficiency {self.efficiency:.3g}>"
        )

    @property
    def throughput_samples_s(self) -> float:
        return self.global_batch / self.step_time_s


def ring_all_reduce_s(nbytes: float, devices: int, link: Interconnect) -> float:
    """α·2(N-1) + 2(N-1)/N · S/B: reduce-scatter then all-gather around a ring of N devices."""
    check_devices(devices)
    if devices == 1 or nbytes <= 0:
        return 0.0
    steps = 2 * (devices - 1)
    return link.latency_s * steps + steps / devices * nbytes / link.bandwidth_bytes_s


def single_device(workload: Workload, global_batch: float) -> Prediction:
    """The baseline every speedup is measured against."""
    step = (workload.forward_s + workload.backward_s) * global_batch
    return make_prediction(workload, "single", 1, global_batch, step, compute=step)


def data_parallel(
    workload: Workload,
    devices: int,
    link: Interconnect,
    *,
    global_batch: float,
    overlap: bool = False,
) -> Prediction:
    """N replicas, each computing G/N samples, gradients summed by a ring all-reduce."""
    check_devices(devices)
    share = global_batch / devices
    forward, backward = workload.forward_s * share, workload.backward_s * share
    comm = ring_all_reduce_s(workload.parameter_bytes, devices, link)
    step = forward + (max(backward, comm) if overlap else backward + comm)
    return make_prediction(
        workload,
        "data",
        devices,
        global_batch,
        step,
        compute=forward + backward,
        comm=comm,
        moved=2 * (devices - 1) * workload.parameter_bytes,
    )


def pipeline(
    workload: Workload,
    partition: Partition,
    link: Interconnect,
    *,
    global_batch: float,
    micro_batches: int = 1,
    schedule: str = "gpipe",
    overlap: bool = False,
    virtual_stages: int = 1,
) -> Prediction:
    """K·v stages on K devices running `schedule` over M micro-batches (`partition` holds a
    share for each of the K·v stages; v > 1 for interleaved schedules only)."""
    run = _replay(
        workload, partition, link, global_batch, micro_batches, schedule, overlap, virtual_stages
    )
    return make_prediction(
        workload,
        "pipeline",
        partition.stages,
        global_batch,
        run.step_s,
        compute=max(run.busy_s),
        comm=run.sends_s,
        moved=_cut_bytes(partition, global_batch),
        bubble=run.bubble,
        exposed=run.step_s - run.free_s,
    )


def data_pipeline(
    workload: Workload,
    partition: Partition,
    replicas: int,
    link: Interconnect,
    *,
    global_batch: float,
    micro_batches: int = 1,
    schedule: str = "gpipe",
    data_link: Interconnect | None = None,
    overlap: bool = False,
) -> Prediction:
    """D copies of a K-stage pipeline; `data_link` (default `link`) carries the all-reduces."""
    check_devices(replicas)
    replica_batch = global_batch / replicas
    run = _replay(workload, partition, link, replica_batch, micro_batches, schedule, overlap)
    stage_bytes = [share * workload.parameter_bytes for share in partition.parameters]
    reduce = max(ring_all_reduce_s(b, replicas, data_link or link) for b in stage_bytes)
    step = run.step_s + reduce
    reduced = math.fsum(2 * (replicas - 1) * b for b in stage_bytes)
    return make_prediction(
        workload,
        "data+pipeline",
        replicas * partition.stages,
        global_batch,
        step,
        compute=max(run.busy_s),
        comm=run.sends_s + reduce,
        moved=replicas * _cut_bytes(partition, replica_batch) + reduced,
        # The all-reduce follows the flush: no device computes meanwhile.
        bubble=1.0 - (1.0 - run.bubble) * run.step_s / step,
        exposed=step - run.free_s,
    )


def pipeline_bound_s(slot_s: float, stages: int, micro_batches: int) -> float:
    """(M + K - 1) · slot: the step time of a gpipe pipeline whose every stage takes `slot_s`
    per micro-batch (forward and backward); with unequal stages, an upper bound when `slot_s` is
    the slowest forward task plus the slowest backward task."""
    return (micro_batches + stages - 1) * slot_s


def _replay(
    workload: Workload,
    partition: Partition,
    link: Interconnect,
    global_batch: float,
    micro_batches: int,
    schedule: str,
    overlap: bool,
    virtual_stages: int = 1,
) -> ReplayedStep:
    devices = max(partition.stages // virtual_stages, 1)
    plan = build_schedule(schedule, devices, micro_batches, virtual_stages)
    micro = global_batch / micro_batches
    forward = [share * workload.forward_s * micro for share in partition.forward]
    backward = [share * workload.backward_s * micro for share in partition.backward]
    sends = [link.send_s(a * micro) for a in partition.cut_bytes]
    return replay(PipelineTasks(plan, stage_work(plan, forward, backward), sends), overlap)


def _cut_bytes(partition: Partition, global_batch: float) -> float:
    """Bytes over every cut in a step, activations down and their gradients back."""
    return 2 * global_batch * math.fsum(partition.cut_bytes)


def make_prediction(
    workload: Workload,
    strategy: str,
    devices: int,
    global_batch: float,
    step: float,
    *,
    compute: float,
    comm: float = 0.0,
    moved: float = 0.0,
    bubble: float = 0.0,
    exposed: float | None = None,
) -> Prediction:
    if not step > 0:
        raise GpkError(f"the predicted step time is {step}; the workload has no compute")
    per_sample = workload.forward_s + workload.backward_s
    speedup = global_batch / step * per_sample
    return Prediction(
        strategy=strategy,
        devices=devices,
        global_batch=global_batch,
        step_time_s=step,
        compute_s=compute,
        comm_time_s=comm,
        exposed_comm_s=max(0.0, step - compute) if exposed is None else exposed,
        comm_bytes=moved,
        bubble_fraction=bubble,
        speedup=speedup,
        efficiency=speedup / devices,
    )


def check_devices(devices: int) -> None:
    whole_number(devices, "devices")


def _check_figure(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise GpkError(f"{name}={value} is not usable; give a finite number, 0 or more")
