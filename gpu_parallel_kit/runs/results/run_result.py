"""Run results as plain data: a frozen dataclass that becomes JSON, a log row and a table row.

Nothing here imports TensorFlow, so results can be read, tabled and plotted in any process.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from ...strategies import canonical

STATUSES = ("ok", "failed", "oom", "crashed", "timeout", "cancelled")


@dataclass(frozen=True)
class RunResult:
    """What one run measured, or why it has no measurements.

    Every front end returns it (`Experiment.run`) or tables it (`Comparison.table`); the run log
    keeps it as JSON (`to_json`, `from_json`). Figures are None where a run did not measure them,
    never zero.
    """

    run_id: str  #: unique per run; the key in the run log
    experiment_id: str  #: runs of one Experiment share it; speedup compares within it
    strategy: str  #: single | data | fsdp | pipeline | tensor | multiworker
    devices: int  #: number of devices (replicas or stages) the run used, over all workers
    virtual: bool  #: True when the devices were logical devices carved out of fewer physical ones
    status: str  #: one of STATUSES
    reason: str = ""  #: one sentence when status is not "ok"
    device_kind: str = "cpu"  #: cpu | gpu
    device_names: tuple[str, ...] = ()  #: TensorFlow names of the devices the run used
    workers: int = 1  #: processes the devices belong to (multiworker, hosts or local processes)
    nodes: int = 1  #: machines the processes ran on (a Slurm step's nodes; 1 on this machine)
    global_batch: int = 0  #: samples per optimizer step, over all devices
    scaling: str = "strong"  #: "strong" keeps the global batch, "weak" each device's batch
    mode: str = "fit"  #: fit (Keras model.fit) | explicit (custom loop, visible all-reduce)
    all_reduce: str = ""  #: the cross-device reduction used by data parallel runs
    schedule: str = ""  #: pipeline schedule (pipeline runs only)
    micro_batches: int | None = None  #: micro-batches per step (pipeline runs only)
    epochs: int = 0  #: passes over the data
    steps_per_epoch: int = 0  #: optimizer steps per epoch
    wall_time_s: float | None = None  #: training only, from the first step to the last, all epochs
    startup_s: float | None = None  #: process start to ready-to-train (devices, model, compile)
    step_times_s: tuple[float, ...] = ()  #: per step, warm-up steps excluded
    warmup_steps: int = 0  #: steps left out of the step-time statistics
    step_time_s: float | None = None  #: median of step_times_s
    step_time_spread_s: float | None = None  #: interquartile range of step_times_s
    #: 95 % interval of step_time_s over steps and rounds (runs/scheduling/step_intervals.py); None
    # for one
    #: run's row, not a comparison's merged rounds
    step_time_ci_low_s: float | None = None
    step_time_ci_high_s: float | None = None  #: the interval's upper end
    throughput_samples_s: float | None = None  #: global_batch / step_time_s
    epoch_times_s: tuple[float, ...] = ()  #: wall time of each epoch
    peak_memory_bytes: dict[str, int] = field(default_factory=dict)  #: per device name
    memory_source: str = ""  #: what the memory figures are, "gpu allocator" or "process peak rss"
    comm_time_s: float | None = None  #: the step's collectives, timed alone after training
    comm_share: float | None = None  #: comm_time_s / step_time_s
    comm_bytes: int | None = None  #: bytes the collectives move per device and step
    projected: bool = False  #: True for rows a cost model projected; never for measured rows
    history: dict[str, list[float]] = field(default_factory=dict)  #: per-epoch loss and metrics
    versions: dict[str, str] = field(default_factory=dict)  #: python, tensorflow, keras, kit
    extra: dict[str, Any] = field(default_factory=dict)  #: engine-specific figures
    created_at: str = ""  #: ISO time the run finished
    # Time to accuracy (runs/description/accuracy_target.py, analysis/tables/time_to_accuracy.py):
    # the learning-rate rule as applied, the target, and the curves with their timestamps (seconds
    # of training since the first step, evaluations excluded).
    lr_scaling: str = "none"  #: none | linear | sqrt
    lr_factor: float = 1.0  #: the rule's multiplier for this run's global batch (1 keeps the rate)
    warmup_epochs: float = 0.0  #: epochs the rate ramped from the base to the scaled one
    base_learning_rate: float | None = None  #: the optimizer's own rate, before the rule
    learning_rate: float | None = None  #: the effective peak rate, base × lr_factor
    target: dict[str, Any] = field(default_factory=dict)  #: metric, value, direction; {} for none
    history_time_s: tuple[float, ...] = ()  #: training seconds at each epoch end of `history`
    evaluations: tuple[dict[str, float], ...] = ()  #: epoch, step, time_s, val_* per evaluation
    evaluation_time_s: float | None = None  #: seconds spent evaluating, left out of every timing
    compile_time_s: float | None = None  #: the first step's time beyond the median step (tracing)
    deterministic: bool = False  #: trained with TensorFlow's op determinism
    backend: str = "tensorflow"  #: tensorflow (tf.distribute) | jax (keras.distribution)
    mesh: str = ""  #: tensor parallel and fsdp, "data x model" devices, e.g. "2x2"

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} is not one of {', '.join(STATUSES)}")

    def __repr__(self) -> str:
        figures = (
            f"step_time_s={self.step_time_s:.4g}, "
            f"throughput_samples_s={self.throughput_samples_s:.4g}"
            if self.status == "ok" and self.step_time_s
            else f"reason={self.reason!r}"
        )
        kind = "virtual " if self.virtual else ""
        return (
            f"<RunResult {self.run_id} {self.strategy} on {self.devices} {kind}{self.device_kind} "
            f"device(s): {self.status}, {figures}>"
        )

    @property
    def devices_per_worker(self) -> int:
        return self.devices // max(self.workers, 1)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def max_peak_memory_bytes(self) -> int | None:
        return max(self.peak_memory_bytes.values()) if self.peak_memory_bytes else None

    @property
    def timeline(self):
        """The measured pipeline tasks as a pandas DataFrame, one row per task

        (device, stage, micro-batch, kind, start, end); empty for other strategies."""
        import pandas as pd

        columns = ["step", "device", "stage", "micro_batch", "kind", "start", "end"]
        return pd.DataFrame(self.extra.get("timeline", []), columns=columns)

    @property
    def stages(self):
        """A pipeline's stages as a pandas DataFrame, one row per stage

        (device, layers, parameter, optimizer and activation bytes, busy and idle seconds per
        step); empty for other strategies."""
        import pandas as pd

        return pd.DataFrame(self.extra.get("stages", []))

    @property
    def cuts(self):
        """What crosses into each pipeline stage, as a pandas DataFrame

        (stage, first and last layer, and per tensor its name, shape and bytes per sample);
        empty for other strategies."""
        import pandas as pd

        rows = [
            {
                "stage": stage["stage"],
                "first_layer": stage.get("first_layer", ""),
                "last_layer": stage.get("last_layer", ""),
                "tensor": tensor["tensor"],
                "shape": tuple(tensor["shape"]),
                "bytes_per_sample": tensor["bytes_per_sample"],
            }
            for stage in self.extra.get("stages", [])
            for tensor in stage.get("receives", [])
        ]
        columns = ["stage", "first_layer", "last_layer", "tensor", "shape", "bytes_per_sample"]
        return pd.DataFrame(rows, columns=columns)

    @property
    def layout(self):
        """A tensor-parallel run's weights as a pandas DataFrame, one row per weight

        (layer, variable, shape, axes, role and the shape of one device's shard); empty for
        other strategies."""
        import pandas as pd

        columns = ["layer", "variable", "shape", "axes", "role", "shard_shape"]
        rows = [
            {
                **p,
                "shape": tuple(p["shape"]),
                "axes": tuple(a or None for a in p["axes"]),
                "shard_shape": tuple(p["shard_shape"]),
            }
            for p in self.extra.get("layout", [])
        ]
        return pd.DataFrame(rows, columns=columns)

    def plot_timeline(self):
        """Planned, measured and simulated Gantt charts of one pipeline step."""
        from ...plots.timeline import timeline_figure

        kind = "virtual " if self.virtual else ""
        title = (
            f"{self.schedule} schedule, {self.devices} {kind}{self.device_kind} devices, "
            f"{self.micro_batches} micro-batch(es)"
        )
        return timeline_figure(self.extra, title)

    def save_trace(self, path: str) -> str:
        """The run's timings as a Trace Event Format file, which ui.perfetto.dev and
        chrome://tracing open: a pipeline's tasks, one track per device, or the steps, with
        communication on tracks of its own (`runs/results/trace_events.py`). Returns `path`."""
        from .trace_events import save_trace

        return save_trace(self, path)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """Rebuild a result from `to_dict` output, ignoring keys newer versions may have added."""
        names = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        if "strategy" in kwargs:  # logged as "model" or "data+model": read as "pipeline", ...
            kwargs["strategy"] = canonical(kwargs["strategy"])
        for key in (
            "device_names",
            "step_times_s",
            "epoch_times_s",
            "history_time_s",
            "evaluations",
        ):
            if key in kwargs and kwargs[key] is not None:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)

    @classmethod
    def from_json(cls, text: str) -> RunResult:
        return cls.from_dict(json.loads(text))
