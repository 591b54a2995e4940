"""Each measured row with the step the cost model predicts for it, from a calibration.

`run(calibration=...)` and `compare(calibration=...)` take a `gpk.DeviceCalibration` (or the
path of one); without one, the newest kept calibration of the run's devices is used, where there
is one. A calibration given is checked against the runs before any of them starts. A model whose
own step the calibration has not timed is timed once (a short child per count of busy devices)
and kept with it; a kept calibration found by itself predicts only the models it has timed, so
a comparison without `calibration=` never starts a child for it. Each row's `extra["predicted"]`
holds the parts (`analysis/cost_model/calibrated_step.PredictedStep`); the table reads them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis.cost_model.calibrated_step import far_off_part, predict, reads_counted_work
from ..analysis.cost_model.counted_work import WorkCount
from ..analysis.cost_model.device_calibration import DeviceCalibration
from ..errors import GpkError
from ..runs.description.run_spec import RunSpec
from .calibration_probe import calibration_folder, kept, with_model
from .phase_progress import PhaseProgress

if TYPE_CHECKING:
    from ..runs.results.run_result import RunResult


@dataclasses.dataclass(frozen=True)
class AskedCalibration:
    """The calibration a comparison predicts from, and whether the user gave it."""

    calibration: DeviceCalibration
    given: bool


def asked_calibration(given: Any, specs: Sequence[RunSpec]) -> AskedCalibration | None:
    """The calibration for `specs`: `given` (a record or a path), checked against every spec
    (one sentence before anything runs), else the newest kept one of their devices, else None."""
    if not specs:
        return None
    widest = max(specs, key=lambda s: s.devices.count)
    if given is None:
        found = kept(widest.backend, widest.devices.kind, widest.devices.count)
        return AskedCalibration(found, False) if found is not None else None
    if isinstance(given, str | Path):
        given = DeviceCalibration.load(given)
    if not isinstance(given, DeviceCalibration):
        raise GpkError(
            f"calibration={type(given).__name__} is not a calibration; pass what "
            "gpk.calibrate() returns, or the path of a file it saved"
        )
    for spec in specs:
        given.check_for(spec.backend, spec.devices.kind, spec.devices.count)
    return AskedCalibration(given, True)


def with_predictions(
    results: Sequence[RunResult],
    asked: AskedCalibration,
    spec: RunSpec,
    key: str,
    counted: Callable[[], Mapping[str, Any]],
) -> list[RunResult]:
    """`results` with `extra["predicted"]` on every finished measured row (a row the
    calibration cannot predict says why there instead); `key` names the model's timed step."""
    calibration = asked.calibration
    if asked.given and not all(calibration.model_step(key, b.devices) for b in calibration.busy):
        shown = PhaseProgress(
            f"Timing the step of {spec.model.name} on the calibrated devices", True, "Timed"
        )
        try:
            calibration = with_model(calibration, spec, key, shown)
        finally:
            shown.close()
        if calibration.path and Path(calibration.path).parent == calibration_folder():
            calibration.save(calibration.path)
    timed = all(calibration.model_step(key, b.devices) for b in calibration.busy)
    if not asked.given and not timed:
        return list(results)  # found by itself, it predicts only models it timed: no child
    work = _work(results, counted, timed) if asked.given else {}
    rows = []
    for result in results:
        if result.projected or not result.ok:
            rows.append(result)
            continue
        try:
            predicted = predict(result, calibration, key, work.get(result.experiment_id))
            figures = {**predicted.to_extra(), "far_off": far_off_part(predicted, result)}
        except GpkError as error:
            figures = {"reason": str(error)}
        rows.append(dataclasses.replace(result, extra={**result.extra, "predicted": figures}))
    return rows


def _work(
    results: Sequence[RunResult], counted: Callable[[], Mapping[str, Any]], timed: bool
) -> Mapping[str, WorkCount]:
    """The counted steps, where the model's step was not timed or a prediction reads them
    (a pipeline's stage shares, a layout's split layers); none otherwise."""
    if timed and not any(reads_counted_work(r) for r in results if r.ok):
        return {}
    try:
        found = counted()
    except GpkError:
        return {}
    return {k: v for k, v in found.items() if isinstance(v, WorkCount)}
