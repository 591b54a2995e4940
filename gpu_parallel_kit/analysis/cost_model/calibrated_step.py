"""The step the cost model predicts for a measured run, from a calibration of the same devices.

Each strategy's record names its predictor (`Strategy.predictor`); every predictor returns a
`PredictedStep` in four parts, so a row far from its measurement says which part is furthest
from its measured part. With c(b, g) the compute of b samples per device while g devices are
busy (the model's own step timed by the calibration, else its counted FLOPs and bytes on the
calibrated rates), P the gradient bytes, B the global batch and κ_g a compiled call::

    single        c(B, 1) + κ₁/s                       (s: steps per compiled call)
    data, N       c(B/N, N)·(1 + a_N) + AR_N(P) + κ_N/s
    fsdp, N       c(B/N, N)·(1 + a_N) + AG_N(gathered) + RS_N(scattered) + AR_N(replicated)
                  + κ_N/s         (a_N: what splitting the batch adds, timed on the model)
    tensor, D×T   c(B/D, D·T)·(1 - f·(1 - 1/T)) + Σ AR_T(activations) + AR_D(P/T) + κ/s
                  (f: the share of the step in the products of the layers the layout splits)
    pipeline, K   the schedule replayed (`step_time_model.pipeline`) with each task's share of
                  c(B/M, min(K, M)), one call per task of the built schedule (three a
                  micro-batch where it splits the backward), and the cut's bytes sent
                  point to point; then each stage's update
    expert, N     c(B/N, N) + 2 · A2A_N(dispatched tokens) + AR_N(P) + κ_N/s

Every figure is read off the calibration or counted; none comes from the run predicted, except
what the run planned (its schedule, stages and layout). Pure arithmetic; no TensorFlow, no JAX.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ...errors import GpkError
from ...pipeline.schedules import build_schedule, host_dispatches, splits_backward
from ...runs.results.run_result import RunResult
from ...strategies import resolve, strategy_record
from ...strategies.tensor import MeshShape
from .counted_work import WorkCount
from .device_calibration import DeviceCalibration
from .hardware_presets import Interconnect
from .step_time_model import Partition, Workload, pipeline

FAR_OFF = (0.85, 1.15)  # predicted ÷ measured outside this: the row names the part furthest off


@dataclass(frozen=True)
class PredictedStep:
    """The cost model's step for one run, in parts; seconds."""

    step_s: float
    compute_s: float
    communication_s: float
    bubble_s: float
    fixed_s: float
    compute_source: str  # "the model's step, timed" or "counted FLOPs and bytes"
    calibration: str  # the calibration's label

    def to_extra(self) -> dict[str, Any]:
        return {
            "step_time_s": self.step_s,
            "compute_s": self.compute_s,
            "communication_s": self.communication_s,
            "bubble_s": self.bubble_s,
            "fixed_s": self.fixed_s,
            "compute_source": self.compute_source,
            "calibration": self.calibration,
        }


class ComputeTime(NamedTuple):
    """A step's compute on the calibrated devices, and what it was read from."""

    seconds: float
    source: str


@dataclass(frozen=True)
class RunToPredict:
    """What a predictor reads: the run, the calibration, the model's key and its counted step."""

    run: RunResult
    calibration: DeviceCalibration
    model_key: str
    work: WorkCount | None

    def busy(self, devices: int) -> int:
        """The smallest count of busy devices measured that is at least `devices` (else the
        largest measured)."""
        counts = sorted(b.devices for b in self.calibration.busy)
        return next((g for g in counts if g >= devices), counts[-1])

    def compute_s(self, samples: float, devices: int) -> ComputeTime:
        """c(samples, devices): forward, backward and update of `samples` per device."""
        g = self.busy(devices)
        timed = self.calibration.model_step_s(self.model_key, samples, g)
        if timed is not None:  # timed without its dispatch, which `fixed_s` charges
            return ComputeTime(timed, "the model's step, timed")
        if self.work is None:
            raise GpkError(
                f"run {self.run.run_id} has neither a timed model step nor a counted step to "
                "predict from; calibrate with gpk.calibrate(model=...)"
            )
        # The counted step holds the optimizer's update: its FLOPs and bytes are in the count.
        return ComputeTime(
            _counted_s(self.calibration, self.work, samples, g), "counted FLOPs and bytes"
        )

    def parameter_bytes(self) -> float:
        return float(self.run.extra.get("parameter_bytes") or 0.0)

    def fixed_s(self, devices: int) -> float:
        """What each step pays beyond its work: Keras's fit loop per step and a share of one
        call, as the calibration timed them; else one call of the model's step (its dispatch
        with the model's arrays), shared by the steps it runs."""
        tuned = self.run.extra.get("tuned") or {}
        together = tuned.get("steps_per_execution") if isinstance(tuned, Mapping) else None
        together = max(int(together or 1), 1)
        g = self.busy(devices)
        loop = self.calibration.fit_step_s(self.model_key, g, together)
        if loop is not None:  # Keras's fit loop, timed around a step of no work
            return loop
        return self.calibration.model_call_s(self.model_key, g) / together

    def task_call_s(self, stages: int) -> float:
        """What one pipeline task costs the host beyond its work: the model's put, call and
        wait, or the pipeline runner's own around no work where dearer, as calibrated."""
        return self.calibration.task_call_s(self.model_key, self.busy(stages))

    def arrival_s(self, compute: float, devices: int) -> float:
        """What a step whose batch XLA splits over the devices (data, fsdp) costs beyond its
        work and the probe's collectives: the share of its compute the calibration measured
        a data-parallel step of the model adding (`DeviceCalibration.arrival_share`). It is
        not carried to other programs: a tensor-parallel step's collectives sit elsewhere."""
        if devices <= 1:
            return 0.0
        return compute * self.calibration.arrival_share(self.model_key, self.busy(devices))

    def all_reduce_s(self, nbytes: float, devices: int) -> float:
        return self.calibration.collective_s("all_reduce", nbytes, devices)


def predict(
    run: RunResult, calibration: DeviceCalibration, model_key: str, work: WorkCount | None
) -> PredictedStep:
    """The predicted step of `run` (its strategy record's predictor); one sentence when the
    calibration cannot predict it."""
    record = strategy_record(run.strategy)
    if record.predictor is None:
        raise GpkError(f"strategy={run.strategy!r} has no calibrated prediction yet")
    if run.workers > 1:
        raise GpkError(
            f"run {run.run_id} spans {run.workers} worker processes, whose collectives go "
            "between processes, and a calibration times them inside one: its step is not "
            "predicted; compare it with a run of as many devices in one process"
        )
    calibration.check_for(run.backend, run.device_kind, run.devices)
    return resolve(record.predictor)(RunToPredict(run, calibration, model_key, work))


def predict_single(asked: RunToPredict) -> PredictedStep:
    compute, source = asked.compute_s(asked.run.global_batch, 1)
    return _step(asked, compute, 0.0, 0.0, asked.fixed_s(1), source)


def predict_data(asked: RunToPredict) -> PredictedStep:
    run, n = asked.run, asked.run.devices
    compute, source = asked.compute_s(run.global_batch / n, n)
    gradients = float(run.extra.get("gradient_bytes") or asked.parameter_bytes())
    comm = asked.all_reduce_s(gradients, n) + asked.arrival_s(compute, n)
    return _step(asked, compute, comm, 0.0, asked.fixed_s(n), source)


def predict_fsdp(asked: RunToPredict) -> PredictedStep:
    run, n = asked.run, asked.run.devices
    data, model = _mesh(run, on_model=False)
    compute, source = asked.compute_s(run.global_batch / n, n)
    extra, cal = run.extra, asked.calibration
    gathered = float(extra.get("all_gather_bytes") or 0.0)
    scattered = float(extra.get("reduce_scatter_bytes") or 0.0)
    comm = (
        (cal.collective_s("all_gather", gathered / 2 / data, data) * 2 if gathered else 0.0)
        + (cal.collective_s("reduce_scatter", scattered, data) if scattered else 0.0)
        + asked.all_reduce_s(float(extra.get("gradient_bytes") or 0.0), data)
        + _activations_s(asked, model)
        + asked.arrival_s(compute, n)
    )
    return _step(asked, compute, comm, 0.0, asked.fixed_s(n), source)


def predict_tensor(asked: RunToPredict) -> PredictedStep:
    """Each device takes its data row's whole share of the batch, B/D: the layers the layout
    splits run a T-th of their products on it, the rest (norms, embeddings, residuals, the
    loss) run whole on every device of the row."""
    run, n = asked.run, asked.run.devices
    data, model = _mesh(run, on_model=True)
    local = run.global_batch / data
    whole, source = asked.compute_s(local, n)
    compute = whole * (1.0 - _split_share(asked, local, n) * (1.0 - 1.0 / model))
    comm = _activations_s(asked, model) + asked.all_reduce_s(
        float(run.extra.get("gradient_bytes") or 0.0), data
    )
    return _step(asked, compute, comm, 0.0, asked.fixed_s(n), source)


def predict_expert(asked: RunToPredict) -> PredictedStep:
    run, n = asked.run, asked.run.devices
    compute, source = asked.compute_s(run.global_batch / n, n)
    dispatched = float(run.extra.get("dispatched_bytes") or 0.0)
    comm = (
        2 * asked.calibration.collective_s("all_to_all", dispatched / n, n) if dispatched else 0.0
    ) + asked.all_reduce_s(float(run.extra.get("gradient_bytes") or 0.0), n)
    return _step(asked, compute, comm, 0.0, asked.fixed_s(n), source)


def predict_pipeline(asked: RunToPredict) -> PredictedStep:
    """Each stage task is its share of the model's work per sample at the micro-batch on one
    busy device, plus one call; the schedule is replayed with those tasks and the
    cuts' sends. Devices that share cores cannot do more work a second than the calibration
    measured with all of them busy, so the step is at least the tasks' total work over that
    aggregate rate. Then the update (the timed step's part whatever its batch) and one call
    per stage for it."""
    run, cal = asked.run, asked.calibration
    stages = sorted(run.extra.get("stages") or (), key=lambda s: s["stage"])
    v = max(int(run.extra.get("virtual_stages") or 1), 1)  # model chunks per device
    chunks = len(stages) or run.devices * v
    k = max(chunks // v, 1)  # devices
    m = run.micro_batches or 1
    micro = run.global_batch / m
    # The step at the micro-batch, less its part whatever the batch (the update, read off the
    # line through the timed batches): a step's cost per sample is not one figure on a CPU,
    # whose caches make a large batch dearer per sample than a small one.
    step, source = asked.compute_s(micro, 1)
    line = cal.model_step_line(asked.model_key, 1)
    fixed_work = min(line.fixed, step / 2) if line is not None else 0.0
    per_sample = (step - fixed_work) / micro
    call = asked.task_call_s(k)
    schedule = run.schedule or "gpipe"
    try:
        plan = build_schedule(schedule, k, m, v)
    except GpkError as error:
        raise GpkError(f"the pipeline of {run.run_id} cannot be replayed: {error}") from None
    passes = 3 if splits_backward(plan) else 2  # tasks per micro-batch and chunk: F, B, or F, I, W
    recomputes = "recomputes" in str(run.extra.get("stage_tasks") or "")
    forward = per_sample / 3.0
    backward = 2.0 * per_sample / 3.0 + (forward if recomputes else 0.0)
    shares = _stage_shares(stages, asked.work, chunks)
    workload = Workload(
        forward_s=forward + call / micro,
        backward_s=backward + (passes - 1) * call / micro,
        parameter_bytes=asked.parameter_bytes(),
    )
    cuts = [c / 2 / run.global_batch for c in run.extra.get("cut_bytes") or []]
    if len(cuts) != chunks - 1:
        cuts = [0.0] * (chunks - 1)
    partition = Partition(shares, shares, shares, tuple(cuts))
    try:
        replayed = pipeline(
            workload,
            partition,
            _link(cal, k),
            global_batch=run.global_batch,
            micro_batches=m,
            schedule=schedule,
            virtual_stages=v,
        )
    except GpkError as error:
        raise GpkError(f"the pipeline of {run.run_id} cannot be replayed: {error}") from None
    work = (forward + backward) * run.global_batch  # every task's compute, all stages
    calls = max(len(tasks) for tasks in plan) * call  # the busiest device's task calls
    update = fixed_work + k * call
    # One thread per device dispatches its tasks, and the host runs one dispatch at a time:
    # every task of every device, and each device's update, one after another.
    host = host_dispatches(plan) * call
    bound = work / _aggregate_rate(asked, micro, k) + calls
    busiest = replayed.compute_s
    if host > max(bound, replayed.step_time_s) + k * call:  # beside the updates' calls
        # The host's dispatch, not the devices, sets the step: the last task's work after it.
        last = (forward + backward) * micro / chunks
        return _step(asked, last, 0.0, 0.0, host + fixed_work, source)
    if bound > replayed.step_time_s:  # the shared cores, not the schedule, set the step
        return _step(asked, bound - calls, replayed.exposed_comm_s, 0.0, calls + update, source)
    bubble = max(replayed.step_time_s - busiest - replayed.exposed_comm_s, 0.0)
    busy_work = busiest - calls
    return _step(asked, busy_work, replayed.exposed_comm_s, bubble, calls + update, source)


def _aggregate_rate(asked: RunToPredict, samples: float, devices: int) -> float:
    """How many devices' worth of work `devices` busy devices do at once, from the timed
    steps: devices × t(1 busy) / t(devices busy), at most `devices`; 1 where not timed."""
    cal, key = asked.calibration, asked.model_key
    g = asked.busy(devices)
    alone = cal.model_step_s(key, samples, 1)
    together = cal.model_step_s(key, samples, g)
    if not alone or not together or devices <= 1:
        return 1.0
    return min(max(g * alone / together, 1e-3), float(devices))


def far_off_part(predicted: PredictedStep, run: RunResult) -> str:
    """The part furthest from its measured part, where the step is off by more than `FAR_OFF`;
    "" otherwise. Measured parts: communication as the run measured it, the bubble as its
    timeline shows it, the rest compute and fixed cost together."""
    ratio = predicted.step_s / run.step_time_s if run.step_time_s else math.nan
    if not math.isfinite(ratio) or FAR_OFF[0] <= ratio <= FAR_OFF[1]:
        return ""
    bubble = float(run.extra.get("bubble_fraction") or 0.0) * run.step_time_s
    comm = float(run.comm_time_s or 0.0)
    rest = max(run.step_time_s - bubble - comm, 0.0)
    gaps = {
        "communication": predicted.communication_s - comm,
        "bubble": predicted.bubble_s - bubble,
        "compute and fixed cost": predicted.compute_s + predicted.fixed_s - rest,
    }
    part, gap = max(gaps.items(), key=lambda item: abs(item[1]))
    return f"{part} {'over' if gap > 0 else 'under'} by {abs(gap) * 1e3:.3g} ms"


def _step(
    asked: RunToPredict, compute: float, comm: float, bubble: float, fixed: float, source: str
) -> PredictedStep:
    return PredictedStep(
        step_s=compute + comm + bubble + fixed,
        compute_s=compute,
        communication_s=comm,
        bubble_s=bubble,
        fixed_s=fixed,
        compute_source=source,
        calibration=asked.calibration.label,
    )


def _counted_s(calibration: DeviceCalibration, work: WorkCount, samples: float, g: int) -> float:
    """Counted work on the calibrated rates: each layer's products at its own size (three per
    forward one), the rest of the FLOPs at the largest size's rate, the bytes on the measured
    bandwidth, one elementwise launch per counted kernel."""
    flops = work.flops_per_sample * samples + work.flops_per_step
    layered = 0.0
    seconds = 0.0
    for layer in work.layers:
        product = layer.forward_flops * samples
        if product > 0 and layer.parameters > 0:
            seconds += 3 * calibration.matmul_s(product, g)
            layered += 3 * product
    rest = max(flops - layered, 0.0)
    largest = max((p.flops for p in calibration.at(g).matmuls), default=0.0)
    if rest > 0 and largest > 0:
        seconds += rest / calibration.matmul_rate(largest, g)
    fixed, bandwidth = calibration.elementwise_fit(g)
    nbytes = work.bytes_per_sample * samples + work.bytes_per_step
    return seconds + nbytes / bandwidth + work.kernels * fixed


def _split_share(asked: RunToPredict, samples: float, devices: int) -> float:
    """The share of a step at `samples` per device spent in the products of the layers the
    run's layout splits over its model axis: their counted FLOPs (forward and backward) on
    the calibrated products' rates, over the whole counted step; 0 where nothing is counted."""
    split = _split_layers(asked.run)
    work, cal = asked.work, asked.calibration
    if work is None or not split:
        return 0.0
    g = asked.busy(devices)
    whole = _counted_s(cal, work, samples, g)
    products = math.fsum(
        3 * cal.matmul_s(layer.forward_flops * samples, g)
        for layer in work.layers
        if layer.name in split and layer.forward_flops > 0
    )
    return min(products / whole, 1.0) if whole > 0 else 0.0


def _split_layers(run: RunResult) -> set[str]:
    """The layers whose weights the run's layout splits over its model axis."""
    layout = run.extra.get("layout") or []
    return {
        str(p.get("layer"))
        for p in layout
        if isinstance(p, Mapping) and "model" in (p.get("axes") or ())
    }


def reads_counted_work(run: RunResult) -> bool:
    """Whether predicting `run` reads the model's counted step beside its timed one: a
    pipeline's stage shares, a layout's split layers."""
    return bool(run.extra.get("stages")) or bool(_split_layers(run))


def _activations_s(asked: RunToPredict, model: int) -> float:
    """The model axis's all-reduces of activations, each on its own (one after another)."""
    run = asked.run
    collectives = run.extra.get("collectives") or []
    if model <= 1 or not isinstance(collectives, list):
        return 0.0
    data = max(run.devices // model, 1)
    local = run.global_batch / data
    return math.fsum(
        asked.calibration.collective_s("all_reduce", c["elements_per_sample"] * local * 4, model)
        for c in collectives
        if isinstance(c, Mapping) and c.get("elements_per_sample")
    )


def _mesh(run: RunResult, on_model: bool) -> MeshShape:
    """(data, model) devices of a layout run: its mesh "DxT", else every device on the model
    axis (`on_model`) or on the data axis."""
    if run.mesh and "x" in run.mesh:
        data, model = (int(v) for v in run.mesh.split("x"))
        return MeshShape(data, model)
    return MeshShape(1, run.devices) if on_model else MeshShape(run.devices, 1)


def _stage_shares(
    stages: list[Mapping[str, Any]], work: WorkCount | None, k: int
) -> tuple[float, ...]:
    """Each stage's share of the work: its layers' counted FLOPs, else its parameters, else
    equal."""
    if work is not None and stages:
        flops = {layer.name: layer.forward_flops for layer in work.layers}
        counted = [math.fsum(flops.get(name, 0.0) for name in s.get("layers", ())) for s in stages]
        if all(c > 0 for c in counted):
            total = math.fsum(counted)
            return tuple(c / total for c in counted)
    sizes = [float(s.get("parameter_bytes") or 0.0) for s in stages]
    if stages and all(v > 0 for v in sizes):
        total = math.fsum(sizes)
        return tuple(v / total for v in sizes)
    return (1.0 / k,) * k


def _link(calibration: DeviceCalibration, devices: int) -> Interconnect:
    """A point-to-point link from the send/receive points: α from the smallest message, the
    bandwidth from the largest two."""
    g = max(2, min(devices, calibration.devices))
    points = sorted(
        (
            p
            for p in calibration.at(_at_least(calibration, g)).collectives
            if p.kind == "send_receive"
        ),
        key=lambda p: p.bytes,
    )
    if len(points) < 2:
        return Interconnect("calibrated", math.inf, 0.0, calibration.label)
    small, before, last = points[0], points[-2], points[-1]
    slope = (last.seconds - before.seconds) / (last.bytes - before.bytes)
    bandwidth = 1.0 / slope if slope > 0 else math.inf
    return Interconnect("calibrated", bandwidth, max(small.seconds, 0.0), calibration.label)


def _at_least(calibration: DeviceCalibration, g: int) -> int:
    counts = sorted(b.devices for b in calibration.busy if b.devices > 1)
    return next((c for c in counts if c >= g), counts[-1] if counts else g)
