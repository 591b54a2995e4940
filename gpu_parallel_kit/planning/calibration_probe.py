"""`gpk.calibrate()`: the devices at hand measured in short children, kept in the cache folder.

One child per count of devices busy at once (1, 2, 4, … and the count asked), each forked from
the backend's server with exactly that many devices, as a run of that many would have them
(`worker/jax/device_probe.py`, `worker/tensorflow/device_probe.py`). Where a model is given, a
further child per count times the model's own step (`model_steps`). The answers become one
`analysis.cost_model.device_calibration.DeviceCalibration`, written to
`<cache folder>/calibrations/`, where `compare()` finds the newest one of its devices.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..analysis.cost_model.device_calibration import (
    DeviceCalibration,
    from_probes,
    model_step_from,
    newest,
)
from ..backends import backend_record
from ..errors import GpkError, whole_number
from ..pipeline.schedules import build_schedule, host_dispatches
from ..runs.description.device_choice import DevicePlan, default_backend, plan_devices
from ..runs.description.device_probe import ProbePlan
from ..runs.description.run_spec import RunSpec
from ..runs.processes.cache_folder import cache_folder
from .phase_progress import PhaseProgress

DEFAULT_BUDGET_S = 60.0  # the whole probe, children's start included, on the default devices
DEFAULT_CPU_DEVICES = 4  # virtual devices probed on a CPU: the lab's largest comparison
MIN_BUDGET_S = 10.0
MICRO_BATCHES = 4  # the micro-batches a pipeline's step is timed at, beside the whole batch
FINE_MICRO_BATCHES = 8  # and a finer split, as 1F1B runs take: small batches cost what they cost
NO_WORK_WIDTH = 4  # the model of no work's inputs and units
NO_WORK_RUNS = 3  # runs of the pipeline of no work, on two devices, at the default budget
# (their median: one run's step moves by a fifth from process to process); fewer with less


def no_work_runs(budget_s: float) -> int:
    """Runs of the pipeline of no work within `budget_s`: three at the default budget, one at a
    quarter of it or less (a run takes 2-4 s)."""
    return max(1, min(NO_WORK_RUNS, round(NO_WORK_RUNS * budget_s / DEFAULT_BUDGET_S)))


def no_work_model(layers: int) -> Any:
    """A model of next to no work, one small layer per pipeline stage: what the pipeline
    runner costs per task around it is the runner's own cost (`BusyDevices.pipeline_task_s`).
    Built in the run's child, which imports Keras."""
    import keras  # noqa: PLC0415 - in the child only

    model = keras.Sequential(
        [keras.Input((NO_WORK_WIDTH,))]
        + [keras.layers.Dense(NO_WORK_WIDTH, name=f"no_work_{i}") for i in range(layers)]
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


def no_work_tasks(devices: int) -> int:
    """Tasks of the pipeline of no work's step on `devices` stages: each stage's forward and
    backward per micro-batch as its GPipe schedule orders them, and each stage's update."""
    return host_dispatches(build_schedule("gpipe", devices, MICRO_BATCHES))


CHILD_TIMEOUT_S = 300.0


def calibration_folder() -> Path:
    """Where calibrations are kept: `<cache folder>/calibrations`."""
    return cache_folder() / "calibrations"


def busy_counts(devices: int) -> tuple[int, ...]:
    """The counts of devices busy at once a calibration of `devices` measures: 1, 2, 4, … and
    `devices` itself."""
    counts, g = [], 1
    while g < devices:
        counts.append(g)
        g *= 2
    return (*counts, devices)


def calibrate(
    devices: int | None = None,
    backend: str | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    *,
    spec: RunSpec | None = None,
    model_key: str | None = None,
    pipeline_task: Callable[[int, int], float] | None = None,
    save: bool = True,
    progress: bool = True,
) -> DeviceCalibration:
    """Measure the devices at hand for the cost model: a minute by default, with progress.

    Times matrix products over a sweep of sizes, elementwise chains, a compiled call's fixed
    cost and the collectives plans use (all-reduce, all-gather, reduce-scatter, all-to-all,
    send/receive) over message sizes, with 1, 2, 4, … and `devices` devices busy at once, in
    one fresh child per count. With `model=`, the model's own step is timed too, at the batch
    sizes its runs give each device.

    Args:
        devices: how many devices: default, every GPU, else 4 virtual devices of the CPU.
        backend: "jax" or "tensorflow"; default, the kit's default backend.
        budget_s: seconds the generic probe may take (the model's step comes on top).
        spec: a run of the model whose own step is timed too (`gpk.calibrate(model=...)`),
            kept under `model_key` (`runs/scheduling/step_counting.work_key`).
        pipeline_task: seconds of one task of the kit's pipeline runner around no work on
            g devices, the median of n runs (`gpk.calibrate` runs a pipeline of a model of no
            work), timed on two busy devices (`no_work_runs(budget_s)` runs) and charged to
            every count of two or more.
        save: keep it in the cache folder (`<cache>/calibrations`), where `compare()` finds it.
        progress: show a bar (a line where output cannot be redrawn).

    Returns:
        A `gpk.DeviceCalibration`: `.table()`, `.plot()`, `.save(path)`.
    """
    backend = backend or default_backend()
    backend_record(backend)  # an unknown backend: one sentence, before anything starts
    if not (isinstance(budget_s, int | float) and budget_s >= MIN_BUDGET_S):
        raise GpkError(f"budget_s={budget_s!r} is too short; give {MIN_BUDGET_S:g} s or more")
    plan = _device_plan(devices, backend)
    counts = busy_counts(plan.count)
    weights = [1 + g for g in counts]  # more devices: more collectives to time
    shown = PhaseProgress(
        f"Calibrating {plan.count} {plan.kind} device(s) on {backend}", progress, "Calibrated"
    )
    started = time.monotonic()
    answers = []
    try:
        for g, weight in zip(counts, weights, strict=True):
            shown.phase(f"{g} busy")
            probe = ProbePlan(devices=g, budget_s=budget_s * weight / sum(weights))
            answers.append(
                _in_child(_entry(backend, "probe_entry"), backend, _plan_of(plan, g), probe)
            )
            shown.tick()
        calibration = from_probes(
            backend, answers, time.monotonic() - started, host=platform.node()
        )
        if pipeline_task is not None and len(counts) > 1:
            # Timed on the fewest devices a pipeline has and charged to every count: over more
            # devices than cores, a pipeline of no work costs more a task than real work's (on
            # JAX, 4 devices of 2 cores: 0.14 ms, the median of 24 runs, where the MLP's tasks
            # with their work cost 0.08-0.12 ms), so a figure there is no floor.
            shown.phase(f"the pipeline runner, {counts[1]} busy")
            task_s = pipeline_task(counts[1], no_work_runs(budget_s))
            shown.tick()
            calibration = calibration.with_pipeline_tasks(dict.fromkeys(counts[1:], task_s))
        if spec is not None:
            if not model_key:
                raise GpkError("a model's step is kept under its key; give model_key=")
            calibration = with_model(calibration, spec, model_key, shown)
    finally:
        shown.close()
    calibration = replace(calibration, probe_s=time.monotonic() - started)
    if save:
        calibration = replace(calibration, path=str(calibration.save(calibration_folder())))
    return calibration


def with_model(
    calibration: DeviceCalibration, spec: RunSpec, key: str, shown: Any = None
) -> DeviceCalibration:
    """`calibration` with the model step of `spec` timed on each count g it measured, at the
    batch a run of g devices gives each device, at a quarter and an eighth of the batch (a
    pipeline's micro-batches) and at the whole batch, kept under `key`."""
    batch = spec.training.batch_size
    steps = []
    for busy in calibration.busy:
        g = busy.devices
        if calibration.model_step(key, g) is not None:
            continue
        # A data-parallel share of the batch on g devices, a pipeline's micro-batch of a
        # quarter and an eighth of it, and the whole batch a tensor-parallel device takes where
        # the data axis is 1; other batches are read between these (each costs a compile). A
        # CPU's step per sample is not one figure: caches make a small batch cheaper or dearer
        # per sample, by model, so the small ones are timed rather than scaled.
        shares = (g, MICRO_BATCHES, FINE_MICRO_BATCHES, 1)
        batches = tuple(sorted({max(1, batch // share) for share in shares}))
        if shown is not None:
            shown.phase(f"the step of {spec.model.name}, {g} busy")
        plan = _plan_of(_device_plan(calibration.devices, calibration.backend), g)
        entry = _entry(calibration.backend, "model_step_entry")
        answer = _in_child(entry, calibration.backend, plan, spec, batches)
        steps.append(model_step_from(answer, key, spec.model.name, g))
    return calibration.with_model_steps(steps) if steps else calibration


def kept(backend: str, device_kind: str, devices: int) -> DeviceCalibration | None:
    """The newest calibration kept of these devices, or None."""
    return newest(calibration_folder(), backend, device_kind, devices)


def _device_plan(devices: int | None, backend: str) -> DevicePlan:
    from ..runs.description.device_choice import discover_physical_devices

    if devices is None:
        gpus = [d for d in discover_physical_devices(backend) if d.kind == "gpu"]
        devices = len(gpus) or DEFAULT_CPU_DEVICES
    whole_number(devices, "devices")
    return plan_devices(devices, backend=backend)


def _plan_of(plan: DevicePlan, count: int) -> DevicePlan:
    if plan.kind == "cpu":
        return DevicePlan(
            kind="cpu", count=count, virtual=count > 1, physical_indices=(0,), per_physical=count
        )
    return DevicePlan(
        kind=plan.kind,
        count=count,
        virtual=plan.virtual,
        physical_indices=plan.physical_indices[:count]
        if not plan.virtual
        else plan.physical_indices,
        per_physical=plan.per_physical,
        memory_per_logical_bytes=plan.memory_per_logical_bytes,
    )


def _entry(backend: str, which: str) -> str:
    entry = getattr(backend_record(backend), which)
    if entry is None:
        raise GpkError(f"backend={backend!r} has no calibration probe; use 'jax' or 'tensorflow'")
    return entry


def _in_child(entry: str, backend: str, *args: Any) -> dict[str, Any]:
    from ..runs.processes.child_process import start_child, stop_child

    process, receiver = start_child(entry, *args, backend=backend)
    try:
        if not receiver.poll(CHILD_TIMEOUT_S):
            raise GpkError(
                f"the calibration probe gave no answer within {CHILD_TIMEOUT_S:g} s; the machine "
                "may be busy: close other notebooks and calibrate again"
            )
        succeeded, answer = receiver.recv()
    except EOFError:
        raise GpkError(
            "the calibration probe ended without answering; the machine may be out of memory"
        ) from None
    finally:
        receiver.close()
        stop_child(process)
    if not succeeded:
        raise GpkError(f"the calibration probe failed: {answer}")
    return answer
