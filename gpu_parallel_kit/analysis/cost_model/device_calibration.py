"""A calibration: the devices at hand measured for the cost model, and what it reads off them.

`gpk.calibrate()` (`planning/calibration_probe.py`) times, in one short child per count of
devices busy at once, square matrix products over a sweep of sizes, chains of elementwise
updates, a compiled call's fixed cost and the collectives the plans use over message sizes, and,
where a model is given, the model's own step at a few batch sizes. This module holds the result
as a typed record, keeps it as JSON in the user's cache folder, and answers the cost model's
questions from its points::

    matmul_s(flops, g)         seconds of a product of `flops`, g devices busy (log-log between
                               the measured sizes, the nearest size's rate outside them)
    elementwise_s(bytes, g)    κ_g + bytes / bandwidth_g, fitted by least squares
    collective_s(kind, n, g)   between the measured message sizes, linear; beyond the largest,
                               its last segment's bandwidth
    model_step_s(key, b, g)    the model's step at b samples per device, linear between batches

Pure arithmetic and JSON; no TensorFlow, no JAX. See `docs/projection.md`, "Calibrating on your
hardware".
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ...errors import GpkError

if TYPE_CHECKING:
    from .hardware_presets import Device, Interconnect
    from .software_stack import SoftwareStack

FORMAT = 1  # bumped when the record's fields change; an older file is refused with a sentence
MAX_AGE_DAYS = 90  # an older calibration is out of date: drivers and libraries move on


@dataclass(frozen=True)
class MatmulPoint:
    """One product (m × k) · (k × n) per device and its seconds."""

    m: int
    k: int
    n: int
    seconds: float

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n


@dataclass(frozen=True)
class ElementwisePoint:
    """One elementwise update of `elements` float32 values per device and its seconds."""

    elements: int
    seconds: float

    @property
    def bytes(self) -> float:
        return 8.0 * self.elements  # each value read and written once


class Line(NamedTuple):
    """A least-squares line: what is paid whatever the amount, and what each unit adds."""

    fixed: float
    per_unit: float


class ElementwiseFit(NamedTuple):
    """Elementwise work on the calibrated devices: seconds per update, and bytes a second."""

    fixed_s: float
    bytes_per_s: float


@dataclass(frozen=True)
class CollectivePoint:
    """One collective over every busy device: `bytes` in each device's buffer, its seconds."""

    kind: str  # all_reduce, all_gather, reduce_scatter, all_to_all, send_receive
    bytes: int
    seconds: float


@dataclass(frozen=True)
class BusyDevices:
    """Everything measured with `devices` devices busy at once."""

    devices: int
    matmuls: tuple[MatmulPoint, ...]
    elementwise: tuple[ElementwisePoint, ...]
    call_s: float  # one compiled call's fixed cost: dispatch and wait
    collectives: tuple[CollectivePoint, ...] = ()
    # One task of the kit's pipeline runner around next to no work: the step of a GPipe
    # pipeline of a model of no work over these devices, over its tasks (0: not timed).
    pipeline_task_s: float = 0.0


@dataclass(frozen=True)
class ModelStep:
    """A model's own step (forward, backward, update) timed per device at several batches."""

    key: str  # what the step depends on (`runs/scheduling/step_counting.work_key`)
    model: str  # its name, for the reader
    devices: int  # busy at once, each training its own copy
    batches: tuple[int, ...]
    seconds: tuple[float, ...]
    # One call of the step, less the step: dispatch and the model's arrays passed (0: not timed).
    dispatch_s: float = 0.0
    # A pipeline task's cost to the host: a put, a call of the forward on two rows, a wait.
    task_s: float = 0.0
    # What splitting the batch adds to each device's step, at a data-parallel share of it: the
    # step as XLA partitions Keras's DataParallel less the step alone (0: not timed). It holds
    # the gradients' all-reduce, of `reduce_bytes`, as the devices reach it from real work.
    reduce_s: float = 0.0
    reduce_bytes: int = 0
    reduce_batch: int = 0  # the batch per device it was timed at
    # Keras's fit loop around a step of next to no work on these devices: per step (the batch
    # fed and spread, callbacks) and per compiled call (0: not timed).
    loop_step_s: float = 0.0
    loop_call_s: float = 0.0


@dataclass(frozen=True)
class DeviceCalibration:
    """The devices at hand, measured: what `gpk.calibrate()` returns and the cost model reads.

    Pass it where a preset is taken (`gpk.GPUCluster(device=calibration)`, `project=`,
    `gpk.search`) and to `run`/`compare` as `calibration=`: each measured row then carries the
    step the cost model predicts for it. `table()` and `plot()` show the points; `save(path)`
    and `DeviceCalibration.load(path)` pass it on.
    """

    backend: str
    device_kind: str  # "cpu" or "gpu"
    description: str  # the processor or GPU model
    device_names: tuple[str, ...]  # every device probed, in order
    versions: Mapping[str, str]
    created_at: str  # ISO 8601, UTC
    probe_s: float  # what probing took, children's start included
    busy: tuple[BusyDevices, ...]
    model_steps: tuple[ModelStep, ...] = ()
    host: str = ""
    memory_bytes: float = 0.0  # each device's memory (a CPU's: the host's, shared out)
    format: int = FORMAT
    path: str = field(default="", compare=False)  # the file it was read from or kept in

    def __repr__(self) -> str:
        counts = ", ".join(str(b.devices) for b in self.busy)
        models = f", {len(self.model_steps)} model step(s)" if self.model_steps else ""
        return (
            f"<DeviceCalibration {self.backend} on {self.devices} {self.device_kind} device(s) "
            f"({self.description}), busy {counts}{models}, {self.created_at}>"
        )

    @property
    def devices(self) -> int:
        return len(self.device_names)

    @property
    def label(self) -> str:
        """How tables and plots name it: 'calibrated on 4 cpu (jax), 2026-12-06'."""
        return (
            f"calibrated on {self.devices} {self.device_kind} ({self.backend}), "
            f"{self.created_at[:10]}"
        )

    # What the cost model asks.
    def at(self, devices: int) -> BusyDevices:
        """The points measured with `devices` busy at once; one sentence when not measured."""
        for busy in self.busy:
            if busy.devices == devices:
                return busy
        measured = ", ".join(str(b.devices) for b in self.busy)
        raise GpkError(
            f"this calibration measured {measured} busy device(s), not {devices}; calibrate "
            f"again with gpk.calibrate(devices={max(devices, self.devices)})"
        )

    def matmul_s(self, flops: float, devices: int = 1) -> float:
        """Seconds of one product of `flops` on each of `devices` busy devices."""
        points = sorted(self.at(devices).matmuls, key=lambda p: p.flops)
        if not points or flops <= 0:
            return 0.0
        sizes = [math.log(p.flops) for p in points]
        rates = [math.log(p.flops / p.seconds) for p in points]
        return flops / math.exp(_between(sizes, rates, math.log(flops), extend=False))

    def matmul_rate(self, flops: float, devices: int = 1) -> float:
        """FLOP/s of one product of `flops` per device, `devices` busy."""
        return flops / self.matmul_s(flops, devices) if flops > 0 else 0.0

    def elementwise_fit(self, devices: int = 1) -> ElementwiseFit:
        """κ seconds per update and bytes/s, fitted to the elementwise points, `devices` busy."""
        points = self.at(devices).elementwise
        fixed, per_byte = _least_squares([p.bytes for p in points], [p.seconds for p in points])
        return ElementwiseFit(max(fixed, 0.0), 1.0 / per_byte if per_byte > 0 else math.inf)

    def elementwise_s(self, nbytes: float, devices: int = 1) -> float:
        fixed, bandwidth = self.elementwise_fit(devices)
        return fixed + nbytes / bandwidth

    def call_s(self, devices: int = 1) -> float:
        return self.at(devices).call_s

    def collective_s(self, kind: str, nbytes: float, devices: int) -> float:
        """Seconds of `kind` over `devices` devices, `nbytes` in each one's buffer."""
        if devices <= 1 or nbytes <= 0:
            return 0.0
        points = sorted(
            (p for p in self.at(devices).collectives if p.kind == kind), key=lambda p: p.bytes
        )
        if not points:
            raise GpkError(
                f"this calibration has no {kind.replace('_', '-')} timed over {devices} "
                "devices; calibrate again with a longer budget_s="
            )
        sizes = [float(p.bytes) for p in points]
        return _between(sizes, [p.seconds for p in points], nbytes, extend=True)

    def model_step(self, key: str, devices: int) -> ModelStep | None:
        return next((s for s in self.model_steps if s.key == key and s.devices == devices), None)

    def model_step_s(self, key: str, batch: float, devices: int) -> float | None:
        """The model's step at `batch` samples per device, `devices` busy; None: not probed."""
        step = self.model_step(key, devices)
        if step is None:
            return None
        smallest = min(range(len(step.batches)), key=lambda i: step.batches[i])
        if batch < step.batches[smallest]:
            # Below the batches timed, the step shrinks with the batch, no faster: a line
            # carried down through a CPU's cache effects would reach zero before it.
            return step.seconds[smallest] * batch / step.batches[smallest]
        return max(_between(list(map(float, step.batches)), list(step.seconds), batch, True), 0.0)

    def model_call_s(self, key: str, devices: int) -> float:
        """One call of the model's step, `devices` busy: its dispatch with the model's arrays
        where the calibration timed it, else a trivial call's."""
        step = self.model_step(key, devices)
        if step is not None and step.dispatch_s > 0:
            return step.dispatch_s
        return self.call_s(devices)

    def arrival_share(self, key: str, devices: int) -> float:
        """The share of the model's step that splitting its batch over `devices` busy devices
        adds beyond the probe's all-reduce of the gradients' bytes: the partitioned step less
        the step alone (`ModelStep.reduce_s`), less that all-reduce, over the step's own time.
        Devices that share cores reach the all-reduce apart, and XLA's partitioned program
        costs more than each device's own; 0 where not timed."""
        step = self.model_step(key, devices)
        if step is None or step.reduce_s <= 0 or step.reduce_bytes <= 0 or devices <= 1:
            return 0.0
        probe = self.collective_s("all_reduce", step.reduce_bytes, devices)
        work = self.model_step_s(key, step.reduce_batch or step.batches[0], devices) or 0.0
        return max(step.reduce_s - probe, 0.0) / work if work > 0 else 0.0

    def fit_step_s(self, key: str, devices: int, steps_per_call: int) -> float | None:
        """What Keras's `fit` loop adds to each step on `devices` busy devices beyond the
        step's work, at `steps_per_call` steps per compiled call: its per-step part and a
        share of a call (the model's own call where that costs more); None: not timed."""
        step = self.model_step(key, devices)
        if step is None or step.loop_step_s <= 0:
            return None
        call = max(step.loop_call_s, self.model_call_s(key, devices))
        return step.loop_step_s + call / max(steps_per_call, 1)

    def task_call_s(self, key: str, devices: int) -> float:
        """What one pipeline task of the model costs the host beyond its work, `devices`
        busy: the model's put, call and wait where timed (else a call of its step), or the
        pipeline runner's own task around no work where that costs more."""
        step = self.model_step(key, devices)
        own = step.task_s if step is not None and step.task_s > 0 else None
        if own is None:
            own = self.model_call_s(key, devices)
        runner = next((b.pipeline_task_s for b in self.busy if b.devices == devices), 0.0)
        return max(own, runner)

    def model_step_line(self, key: str, devices: int) -> Line | None:
        """Seconds per step whatever its batch, and per sample: the least-squares line
        through the model's timed steps, `devices` busy; None when fewer than two batches."""
        step = self.model_step(key, devices)
        if step is None or len(step.batches) < 2:
            return None
        fixed, per_sample = _least_squares(list(map(float, step.batches)), list(step.seconds))
        return Line(max(fixed, 0.0), max(per_sample, 0.0))

    def with_pipeline_tasks(self, seconds: Mapping[int, float]) -> DeviceCalibration:
        """This calibration with the pipeline runner's task (`BusyDevices.pipeline_task_s`)
        timed on each count of busy devices `seconds` names."""
        busy = tuple(
            replace(b, pipeline_task_s=float(seconds[b.devices])) if b.devices in seconds else b
            for b in self.busy
        )
        return replace(self, busy=busy)

    def with_model_steps(self, steps: Iterable[ModelStep]) -> DeviceCalibration:
        """This calibration with `steps` added (a model's earlier steps replaced)."""
        added = tuple(steps)
        kept = tuple(
            s
            for s in self.model_steps
            if (s.key, s.devices) not in {(a.key, a.devices) for a in added}
        )
        return replace(self, model_steps=kept + added)

    # Used where a preset is.
    def as_device(self) -> Device:
        """These devices as a cost-model device: the fastest product rate and the elementwise
        bandwidth measured with every device busy, so a plan's step is timed at what this
        machine gives each device when all of them work (`gpk.GPUCluster(device=...)`)."""
        from .hardware_presets import Device

        widest = self.busy[-1]
        rate = max((p.flops / p.seconds for p in widest.matmuls), default=0.0)
        _, bandwidth = self.elementwise_fit(widest.devices)
        return Device(
            name=f"{self.description} ({self.label})",
            flops=rate,
            memory_bytes=self.memory_bytes or 1e9,
            memory_bandwidth_bytes_s=bandwidth if math.isfinite(bandwidth) else rate,
            source=self.label,
            fp32_flops=rate,
            tf32_flops=rate,
            fused_attention=False,
        )

    def as_stack(self) -> SoftwareStack:
        """What these devices' software reaches, measured, as the record a published stack is
        fitted into (`software_stack.SoftwareStack`): the share of `as_device`'s peak each
        measured product reached by its shape, fitted as the published runs are fitted, and a
        compiled call's fixed cost as each step's. The overlaps are the defaults: a probe of
        separate calls measures none."""
        from .matmul_efficiency import MatmulEfficiency, Measured, fit
        from .software_stack import SoftwareStack

        widest = self.busy[-1]
        rate = max((p.flops / p.seconds for p in widest.matmuls), default=0.0)
        points = [
            Measured(f"{p.m}x{p.k}x{p.n}", 1 / p.m + 1 / p.n + 1 / p.k, p.flops / p.seconds / rate)
            for p in widest.matmuls
        ]
        try:
            matmul = fit(points, self.label)
        except GpkError:  # one shape, or shapes that give no line: the peak alone
            matmul = MatmulEfficiency(1.0, 0.0, source=self.label)
        return SoftwareStack(
            "calibrated",
            matmul,
            step_fixed_s=widest.call_s,
            released=self.created_at[:7],
            device=f"{widest.devices} busy {self.description}",
            source=self.label,
            calibrated=True,
        )

    def as_link(self) -> Interconnect:
        """The link between these devices: α and the bandwidth of the all-reduce's largest
        measured group, read back to a ring's per-link figures."""
        from .hardware_presets import Interconnect

        widest = max((b for b in self.busy if b.collectives), key=lambda b: b.devices, default=None)
        points = sorted(
            (p for p in (widest.collectives if widest else ()) if p.kind == "all_reduce"),
            key=lambda p: p.bytes,
        )
        if len(points) < 2:
            raise GpkError(
                "this calibration timed no all-reduce over several devices; calibrate with "
                "gpk.calibrate(devices=2) or more"
            )
        n = widest.devices
        ring = 2 * (n - 1)
        slope = (points[-1].seconds - points[-2].seconds) / (points[-1].bytes - points[-2].bytes)
        bandwidth = ring / n / slope if slope > 0 else math.inf
        return Interconnect(self.label, bandwidth, max(points[0].seconds / ring, 0.0), self.label)

    # Checks, before anything runs.
    def check_for(self, backend: str, device_kind: str, devices: int) -> None:
        """One sentence when this calibration cannot predict a run of `devices` `device_kind`
        devices on `backend`: another backend, other devices, too few, or out of date."""
        if backend != self.backend:
            raise GpkError(
                f"the calibration was measured on {self.backend}, and this run is on {backend}; "
                f"calibrate with gpk.calibrate(backend={backend!r})"
            )
        if device_kind != self.device_kind:
            raise GpkError(
                f"the calibration measured {self.device_kind} devices, and this run uses "
                f"{device_kind} devices; calibrate the devices the run uses"
            )
        if devices > self.devices:
            raise GpkError(
                f"the calibration measured {self.devices} device(s), and this run uses "
                f"{devices}; calibrate with gpk.calibrate(devices={devices})"
            )
        age = self.age_days()
        if age > MAX_AGE_DAYS:
            raise GpkError(
                f"the calibration of {self.created_at[:10]} is {age:.0f} days old, over "
                f"{MAX_AGE_DAYS}; calibrate again with gpk.calibrate()"
            )

    def age_days(self, now: datetime | None = None) -> float:
        made = datetime.fromisoformat(self.created_at)
        return ((now or datetime.now(UTC)) - made).total_seconds() / 86400

    # Keeping and passing on.
    def to_json(self) -> str:
        data = asdict(self)
        data.pop("path")
        return json.dumps(data, indent=1)

    def save(self, path: str | Path) -> Path:
        """Write the calibration as JSON to `path`: a file ending in .json, else a folder (made
        where missing) that gets a dated file name."""
        target = Path(path)
        if target.suffix != ".json":
            target = target / file_name(self)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.to_json())
        return target

    @classmethod
    def load(cls, path: str | Path) -> DeviceCalibration:
        """Read a calibration written by `save` (or kept in the cache folder)."""
        try:
            data = json.loads(Path(path).read_text())
        except OSError as error:
            raise GpkError(
                f"the calibration {str(path)!r} cannot be read ({error.strerror}); give the path "
                "of a file gpk.calibrate() saved"
            ) from None
        except ValueError:
            raise GpkError(
                f"the calibration {str(path)!r} is not JSON; give a file gpk.calibrate() saved"
            ) from None
        return from_dict(data, str(path))

    def table(self) -> Any:
        """Every measured point as a pandas table: what, busy devices, size, seconds, rate."""
        import pandas as pd

        rows = []
        for busy in self.busy:
            g = busy.devices
            for p in busy.matmuls:
                rows.append(("matmul", g, f"{p.m}×{p.k}×{p.n}", p.seconds, p.flops / p.seconds))
            for p in busy.elementwise:
                rows.append(
                    ("elementwise", g, f"{p.elements:,} values", p.seconds, p.bytes / p.seconds)
                )
            rows.append(("call", g, "one compiled call", busy.call_s, math.nan))
            if busy.pipeline_task_s > 0:
                rows.append(
                    # timed on two devices and charged to every count (`calibration_probe`)
                    ("pipeline task", g, "runner, no work, on 2", busy.pipeline_task_s, math.nan)
                )
            for p in busy.collectives:
                rows.append((p.kind, g, f"{p.bytes:,} B", p.seconds, p.bytes / p.seconds))
        for s in self.model_steps:
            for b, t in zip(s.batches, s.seconds, strict=True):
                rows.append((f"step of {s.model}", s.devices, f"{b} samples", t, b / t))
        columns = ["measured", "busy_devices", "size", "seconds", "rate_per_s"]
        return pd.DataFrame(rows, columns=columns)

    def summary(self) -> Any:
        """One row per count of busy devices: the fastest product's rate, the elementwise
        bandwidth, one call's cost and the largest all-reduce's rate (`table()` has every
        point)."""
        import pandas as pd

        rows = []
        for busy in self.busy:
            g = busy.devices
            reduces = [p for p in busy.collectives if p.kind == "all_reduce"]
            largest = max(reduces, key=lambda p: p.bytes, default=None)
            rows.append(
                {
                    "busy devices": g,
                    "matmul (GFLOP/s)": max((p.flops / p.seconds for p in busy.matmuls), default=0)
                    / 1e9,
                    "elementwise (GB/s)": self.elementwise_fit(g).bytes_per_s / 1e9,
                    "one call (µs)": busy.call_s * 1e6,
                    "all-reduce (GB/s)": largest.bytes / largest.seconds / 1e9
                    if largest is not None
                    else math.nan,
                    "at (MiB)": largest.bytes / 2**20 if largest is not None else math.nan,
                }
            )
        return pd.DataFrame(rows).set_index("busy devices").round(3)

    def curves(self) -> dict[str, dict[int, list[tuple[float, float]]]]:
        """Each measured curve, per count of busy devices, as (size, rate) points: "matmul"
        (FLOPs, FLOP/s), "elementwise" (bytes, bytes/s), "all_reduce" … (bytes, bytes/s)."""
        found: dict[str, dict[int, list[tuple[float, float]]]] = {}
        for busy in self.busy:
            g = busy.devices
            found.setdefault("matmul", {})[g] = [
                (p.flops, p.flops / p.seconds) for p in busy.matmuls
            ]
            found.setdefault("elementwise", {})[g] = [
                (p.bytes, p.bytes / p.seconds) for p in busy.elementwise
            ]
            for p in busy.collectives:
                found.setdefault(p.kind, {}).setdefault(g, []).append(
                    (p.bytes, p.bytes / p.seconds)
                )
        return found

    def plot(self, preset: str | None = None) -> Any:
        """The measured curves (`curves()`), one panel each, a line per count of busy devices,
        beside the roofline of `preset` (a GPU such as "h100") where one is named."""
        from ...plots.calibration import calibration_figure  # noqa: PLC0415 - draws plain data

        roof = None
        if preset is not None:
            from .hardware_presets import device

            gpu = device(preset)
            roof = (
                gpu.name,
                gpu.peak_flops("fp32" if gpu.fp32_flops else "bf16"),
                gpu.memory_bandwidth_bytes_s,
            )
        return calibration_figure(self.curves(), self.label, roof)


def file_name(calibration: DeviceCalibration) -> str:
    """'jax-cpu-4-2026-12-06T21-52-43.json': backend, kind, count, when."""
    when = calibration.created_at.replace(":", "-").replace("+00-00", "")
    return f"{calibration.backend}-{calibration.device_kind}-{calibration.devices}-{when}.json"


def from_dict(data: Mapping[str, Any], path: str = "") -> DeviceCalibration:
    """A calibration from its JSON form; one sentence for another format or a broken file."""
    if data.get("format") != FORMAT:
        raise GpkError(
            f"the calibration {path or 'given'} has format {data.get('format')!r}, not {FORMAT}; "
            "calibrate again with gpk.calibrate()"
        )
    try:
        busy = tuple(_busy(b) for b in data["busy"])
        steps = tuple(
            model_step_from(s, s["key"], s["model"], int(s["devices"]))
            for s in data.get("model_steps", ())
        )
        return DeviceCalibration(
            backend=data["backend"],
            device_kind=data["device_kind"],
            description=data["description"],
            device_names=tuple(data["device_names"]),
            versions=dict(data["versions"]),
            created_at=data["created_at"],
            probe_s=float(data["probe_s"]),
            busy=busy,
            model_steps=steps,
            host=data.get("host", ""),
            memory_bytes=float(data.get("memory_bytes", 0.0)),
            path=path,
        )
    except (KeyError, TypeError, ValueError) as error:
        raise GpkError(
            f"the calibration {path or 'given'} lacks {error}; calibrate again with gpk.calibrate()"
        ) from None


def model_step_from(timed: Mapping[str, Any], key: str, model: str, devices: int) -> ModelStep:
    """The `ModelStep` of a probing child's answer or a file's entry: its batches and seconds,
    and the figures around the step, their defaults where not timed (a file from before)."""
    around = {
        f.name: type(f.default)(timed[f.name])
        for f in fields(ModelStep)
        if f.name in timed and f.name not in ("key", "model", "devices", "batches", "seconds")
    }
    return ModelStep(
        key=key,
        model=model,
        devices=devices,
        batches=tuple(timed["batches"]),
        seconds=tuple(timed["seconds"]),
        **around,
    )


def from_probes(
    backend: str,
    answers: Sequence[Mapping[str, Any]],
    probe_s: float,
    host: str = "",
    now: datetime | None = None,
) -> DeviceCalibration:
    """A calibration from the probing children's answers, one per count of busy devices."""
    if not answers:
        raise GpkError("no probe answered; nothing was calibrated")
    widest = max(answers, key=lambda a: a["devices"])
    busy = tuple(_busy(a) for a in sorted(answers, key=lambda a: a["devices"]))
    return DeviceCalibration(
        backend=backend,
        device_kind=widest["device_kind"],
        description=widest["description"],
        device_names=tuple(widest["device_names"]),
        versions=dict(widest["versions"]),
        created_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
        probe_s=probe_s,
        busy=busy,
        host=host,
        memory_bytes=float(widest.get("memory_bytes", 0.0)),
    )


def _busy(points: Mapping[str, Any]) -> BusyDevices:
    """The points measured with one count of devices busy, from a probe's answer or a file."""
    return BusyDevices(
        devices=int(points["devices"]),
        matmuls=tuple(MatmulPoint(**p) for p in points["matmuls"]),
        elementwise=tuple(ElementwisePoint(**p) for p in points["elementwise"]),
        call_s=float(points["call_s"]),
        collectives=tuple(CollectivePoint(**p) for p in points["collectives"]),
        pipeline_task_s=float(points.get("pipeline_task_s", 0.0)),
    )


def newest(folder: Path, backend: str, device_kind: str, devices: int) -> DeviceCalibration | None:
    """The newest kept calibration of `backend` on at least `devices` `device_kind` devices,
    in date; None when there is none (an unreadable file is passed over)."""
    found = []
    for path in folder.glob(f"{backend}-{device_kind}-*.json") if folder.is_dir() else ():
        try:
            calibration = DeviceCalibration.load(path)
        except GpkError:
            continue
        if calibration.devices >= devices and calibration.age_days() <= MAX_AGE_DAYS:
            found.append(calibration)
    return max(found, key=lambda c: c.created_at, default=None)


def _between(xs: Sequence[float], ys: Sequence[float], x: float, extend: bool) -> float:
    """y at x, linear between the points (sorted by x); outside them, the nearest y, or with
    `extend` the end segment carried on."""
    if len(xs) == 1:
        return ys[0] * (x / xs[0] if extend and xs[0] > 0 else 1.0)
    i = bisect_left(xs, x)
    if i == 0 or i == len(xs):
        if not extend:
            return ys[0] if i == 0 else ys[-1]
        i = 1 if i == 0 else len(xs) - 1
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 != x0 else y0


def _least_squares(xs: Sequence[float], ys: Sequence[float]) -> Line:
    """The least-squares line through the points."""
    n = len(xs)
    if n < 2:
        return Line(ys[0] if ys else 0.0, 0.0)
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return Line(my, 0.0)
    slope = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return Line(my - slope * mx, slope)
