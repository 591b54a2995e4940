"""The complete, validated description of one run: what a worker process receives.

Validation happens here, in the caller, on plain values, so every mistake is one sentence raised
before a worker starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .devices import DevicePlan
from .errors import GpkError
from .schedules import SCHEDULES, build_schedule
from .sources import DataSource, ModelSource

STRATEGIES = ("single", "data", "model")
MODES = ("fit", "explicit")
ALL_REDUCE = ("auto", "nccl", "hierarchical", "reduce_to_one")
SCALING = ("strong", "weak")


@dataclass(frozen=True)
class TrainingConfig:
    """How to train, independent of where: shared by every run of an experiment."""

    batch_size: int  # global batch (strong scaling) or per-device batch (weak scaling)
    epochs: int = 1
    steps_per_epoch: int | None = None  # None: as many full global batches as the data holds
    seed: int = 0
    scaling: str = "strong"
    optimizer: Any = None  # str, config dict or zero-argument factory; None keeps the model's own
    loss: Any = None
    metrics: tuple[Any, ...] = ()
    shuffle: bool = True
    warmup_steps: int | None = None  # None: stats.default_warmup_steps

    def __post_init__(self) -> None:
        for name in ("batch_size", "epochs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}={value!r} must be a whole number")
            if value <= 0:
                raise GpkError(f"{name}={value} must be at least 1")
        if self.steps_per_epoch is not None and (
            isinstance(self.steps_per_epoch, bool)
            or not isinstance(self.steps_per_epoch, int)
            or self.steps_per_epoch <= 0
        ):
            raise GpkError(
                f"steps_per_epoch={self.steps_per_epoch!r} must be a positive whole number, "
                "or None to use all the data"
            )
        if self.scaling not in SCALING:
            raise GpkError(f"scaling={self.scaling!r} is not 'strong' or 'weak'; pick one of those")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise GpkError(f"warmup_steps={self.warmup_steps} must be 0 or more")

    def global_batch(self, devices: int) -> int:
        """Strong scaling keeps the global batch; weak scaling keeps each device's share."""
        return self.batch_size * devices if self.scaling == "weak" else self.batch_size


@dataclass(frozen=True)
class RunSpec:
    """One run: a strategy on a device plan, with the experiment's model, data and training."""

    run_id: str
    experiment_id: str
    strategy: str
    devices: DevicePlan
    model: ModelSource
    data: DataSource
    training: TrainingConfig
    mode: str = "fit"  # fit: Keras model.fit; explicit: custom loop with a visible all-reduce
    all_reduce: str = "auto"
    steps_per_execution: int = 1
    timeout_s: float | None = None  # None: no limit
    save_weights: str | None = None  # .npz path for the trained weights, in model.weights order
    schedule: str = ""  # model parallel: naive | gpipe | 1f1b
    micro_batches: int | None = None  # model parallel: micro-batches per global batch
    balance: Any = "params"  # model parallel: params | time | stage start indices
    memory_budget: int | None = None  # bytes of parameters + optimizer state allowed per device

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise GpkError(
                f"strategy={self.strategy!r} is not known; use one of {', '.join(STRATEGIES)}"
            )
        if self.strategy == "single" and self.devices.count != 1:
            raise GpkError(
                f"strategy='single' runs on one device, not {self.devices.count}; "
                "use devices=1, or strategy='data' for several"
            )
        if self.mode not in MODES:
            raise GpkError(f"mode={self.mode!r} is not known; use 'fit' or 'explicit'")
        if self.all_reduce not in ALL_REDUCE:
            raise GpkError(
                f"all_reduce={self.all_reduce!r} is not known; use one of {', '.join(ALL_REDUCE)}"
            )
        if self.all_reduce == "nccl" and self.devices.kind != "gpu":
            raise GpkError("all_reduce='nccl' needs GPUs; use 'auto' or 'reduce_to_one' on the CPU")
        if self.memory_budget is not None and (
            isinstance(self.memory_budget, bool)
            or not isinstance(self.memory_budget, int)
            or self.memory_budget <= 0
        ):
            raise GpkError(
                f"memory_budget={self.memory_budget!r} must be a positive number of bytes, "
                "e.g. 64 * 2**20"
            )
        if self.steps_per_execution < 1:
            raise GpkError(f"steps_per_execution={self.steps_per_execution} must be at least 1")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise GpkError(f"timeout={self.timeout_s} must be a positive number of seconds")
        if self.strategy == "model":
            self._check_pipeline()
        else:
            check_batch(self.global_batch, self.devices.count)
        check_enough_data(self.data.samples, self.global_batch)

    def _check_pipeline(self) -> None:
        if self.schedule not in SCHEDULES:
            raise GpkError(
                f"schedule={self.schedule!r} is not known; use one of {', '.join(SCHEDULES)}"
            )
        m = self.micro_batches
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise GpkError(f"micro_batches={m!r} must be a whole number of at least 1")
        build_schedule(self.schedule, self.devices.count, m)  # naive with M > 1 is refused here
        if self.global_batch % m:
            lower = self.global_batch - self.global_batch % m
            raise GpkError(
                f"batch_size={self.global_batch} does not split into {m} micro-batches; use a "
                f"multiple of {m}, e.g. {lower or m} or {lower + m}"
            )

    @property
    def global_batch(self) -> int:
        return self.training.global_batch(self.devices.count)

    def result_identity(self) -> dict[str, Any]:
        """The RunResult fields every row of this run carries, whether it finished or not."""
        return dict(
            run_id=self.run_id,
            experiment_id=self.experiment_id,
            strategy=self.strategy,
            devices=self.devices.count,
            virtual=self.devices.virtual,
            device_kind=self.devices.kind,
            global_batch=self.global_batch,
            scaling=self.training.scaling,
            mode=self.mode,
            epochs=self.training.epochs,
            schedule=self.schedule,
            micro_batches=self.micro_batches,
        )


def check_batch(global_batch: int, devices: int) -> None:
    """A global batch must split evenly over the replicas: each gets the same share."""
    if global_batch % devices == 0:
        return
    lower = global_batch - global_batch % devices
    upper = lower + devices
    nearest = f"{lower} or {upper}" if lower > 0 else f"{upper}"
    raise GpkError(
        f"batch_size={global_batch} is not divisible by {devices} devices; "
        f"use a multiple of {devices}, e.g. {nearest}"
    )


def check_enough_data(samples: int | None, global_batch: int) -> None:
    if samples is not None and samples < global_batch:
        raise GpkError(
            f"the data has {samples} samples, fewer than one global batch of {global_batch}; "
            f"use batch_size <= {samples} or more data"
        )
