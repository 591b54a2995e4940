"""The complete, validated description of one run: what a worker process receives.

Validation happens here, in the caller, on plain values, so every mistake is one sentence raised
before a worker starts.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...backends import backend_record
from ...errors import GpkError, whole_number
from ...pipeline.microbatch import is_auto
from ...strategies import (
    accepted_names,
    check_backend,
    check_batch,
    option_named,
    option_owners,
    strategy_record,
)
from ...strategies.long_sequences import SequenceSplit, named
from ...strategies.processes import check_workers
from ...strategies.tensor import MeshShape
from .accuracy_target import Target
from .communication_reuse import MeasuredComm
from .device_choice import DevicePlan
from .learning_rate_rules import check_rule, check_warmup, lr_factor
from .sources import DataSource, ModelSource
from .tuning_rules import check_tune

# Every name a user may give a run's strategy (the registry's, aliases included).
STRATEGIES = accepted_names()
MODES = ("fit", "explicit")
ALL_REDUCE = ("auto", "nccl", "hierarchical", "reduce_to_one", "ring")
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
    # Time to accuracy (runs/description/accuracy_target.py,
    # runs/description/learning_rate_rules.py): how the rate follows the global batch, what is
    # evaluated during training, and the target a run must reach.
    lr_scaling: str = "none"  # none | linear | sqrt, for k = global batch / batch_size
    warmup_epochs: float = 0.0  # epochs over which the rate ramps from the base to the scaled one
    target: Target | None = None  # e.g. val_accuracy >= 0.9; judged in the caller
    validation: DataSource | None = None  # held-out data evaluated in the worker during training
    validation_every_steps: int | None = None  # None: evaluate at each epoch end
    deterministic: bool = False  # TensorFlow's op determinism: same seed, same curve

    def __post_init__(self) -> None:
        whole_number(self.batch_size, "batch_size")
        whole_number(self.epochs, "epochs")
        if self.steps_per_epoch is not None:
            whole_number(
                self.steps_per_epoch, "steps_per_epoch", hint="or None to use all the data"
            )
        if self.scaling not in SCALING:
            raise GpkError(f"scaling={self.scaling!r} is not 'strong' or 'weak'; pick one of those")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise GpkError(f"warmup_steps={self.warmup_steps} must be 0 or more")
        self._check_convergence_options()

    def _check_convergence_options(self) -> None:
        check_rule(self.lr_scaling)
        check_warmup(self.warmup_epochs, self.epochs)
        if self.target is not None and not isinstance(self.target, Target):
            raise TypeError(f"target={self.target!r} must be a Target (see parse_target)")
        every = self.validation_every_steps
        if every is not None:
            whole_number(every, "validation_every_steps", hint="or None for every epoch")
        if not isinstance(self.deterministic, bool):
            raise TypeError(f"deterministic={self.deterministic!r} must be True or False")
        if self.target and self.target.metric.startswith("val_") and self.validation is None:
            raise GpkError(
                f"target {self.target} needs validation data; pass validation=(x_val, y_val), a "
                "fraction such as 0.1, or a dataset builder, or target a training metric (loss)"
            )

    def global_batch(self, devices: int) -> int:
        """Strong scaling keeps the global batch; weak scaling keeps each device's share."""
        return self.batch_size * devices if self.scaling == "weak" else self.batch_size

    def lr_factor(self, global_batch: int) -> float:
        """The learning-rate multiplier for `global_batch`: k = global batch / batch_size under
        the rule (1 under strong scaling, where the global batch is the base batch)."""
        return lr_factor(self.lr_scaling, global_batch, self.batch_size)

    def result_identity(self, global_batch: int) -> dict[str, Any]:
        """The RunResult fields a run's training settings give it, whether it finished or not."""
        return dict(
            lr_scaling=self.lr_scaling,
            lr_factor=self.lr_factor(global_batch),
            warmup_epochs=float(self.warmup_epochs),
            target=self.target.to_dict() if self.target else {},
            deterministic=self.deterministic,
        )


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
    # None: tune's choice (runs/description/tuning_rules.py), or 1 with tune="off"; a number always
    # wins.
    steps_per_execution: int | None = None
    jit_compile: bool | None = None  # XLA; None: tune's choice, or off with tune="off"
    tune: str = "auto"  # auto: fast settings by rules (tuning_rules.py); off: Keras's defaults
    measure_comm: bool = True  # False: skip the after-training all-reduce measurement
    timeout_s: float | None = None  # None: no limit
    save_weights: str | None = None  # .npz path for the trained weights, in model.weights order
    memory_budget: int | None = None  # bytes per device: params, grads, optimizer, activations
    backend: str = "tensorflow"  # tensorflow (tf.distribute) | jax (keras.distribution)
    # the strategy's own options (`Strategy.options`), as its record's `plan` shaped them and
    # its `check` settled them, e.g. {"schedule": "gpipe", "micro_batches": 4, ...}; read as
    # attributes too: `spec.schedule`
    options: Mapping[str, Any] = field(default_factory=dict)
    # the caller's training gate (runs/scheduling/training_gate.py): set when the next run may start
    # beside this run's after-training work; None: the run neither waits nor holds
    gate: str | None = None
    # communication an earlier round of this configuration measured
    # (runs/description/communication_reuse.py): the run reports those figures instead of measuring
    # again
    comm_from: MeasuredComm | None = None
    # a comparison's rounds trained in one process (runs/scheduling/resident_rounds.py): (the
    # configuration's first run id, this round from 0, its rounds); None: this run is its process's
    # only one
    resident: tuple[str, int, int] | None = None
    # started with the comparison's other first rounds, each preparing under a share of the
    # gate until every one has (runs/scheduling/resident_rounds.py); False: prepared when its turn
    # comes
    prepares_together: bool = False
    # the Slurm allocation (cluster/slurm/allocation.py) whose job step runs it; None: this machine
    slurm: Any = None

    def __getattr__(self, name: str) -> Any:
        # Only for names a dataclass field or property does not hold: a strategy's option, its
        # value as this run holds it, or what a run whose strategy lacks it reads.
        options = self.__dict__.get("options")
        if options is not None and name in options:
            return options[name]
        declared = option_named(name) if not name.startswith("_") else None
        if declared is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return declared.absent

    @property
    def rounds_here(self) -> int:
        """The rounds this run's process trains, one after another: this one and those after."""
        return 1 if self.resident is None else self.resident[2] - self.resident[1]

    @property
    def more_rounds_here(self) -> bool:
        """Whether this run's process trains another round after this one."""
        return self.rounds_here > 1

    def __post_init__(self) -> None:
        # The record's own name: "model" is read as "pipeline" from here on.
        object.__setattr__(self, "strategy", strategy_record(self.strategy).name)
        record = check_backend(self.backend, self.strategy)
        # The spec's own copy: the record's check settles values in it (fsdp's default mesh).
        object.__setattr__(self, "options", dict(self.options))
        self._check_options(record)
        if self.mode not in MODES:
            raise GpkError(f"mode={self.mode!r} is not known; use 'fit' or 'explicit'")
        if self.all_reduce not in ALL_REDUCE:
            raise GpkError(
                f"all_reduce={self.all_reduce!r} is not known; use one of {', '.join(ALL_REDUCE)}"
            )
        self._check_backend()
        if not record.processes and self.all_reduce == "ring":
            raise GpkError("all_reduce='ring' is for strategy='multiworker'; use 'auto' here")
        if self.all_reduce == "nccl" and self.devices.kind != "gpu":
            raise GpkError("all_reduce='nccl' needs GPUs; use 'auto' or 'reduce_to_one' on the CPU")
        if self.memory_budget is not None:
            whole_number(self.memory_budget, "memory_budget", hint="in bytes, e.g. 64 * 2**20")
        if not isinstance(self.recompute, bool):
            raise TypeError(f"recompute={self.recompute!r} must be True or False")
        check_tune(self.tune, self.steps_per_execution, self.jit_compile, self.measure_comm)
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise GpkError(f"timeout={self.timeout_s} must be a positive number of seconds")
        check_workers(record, self.backend, self.options.get("workers"), self.cluster)
        record.check(self)
        if not record.stages:  # a pipeline splits its batch into micro-batches instead
            check_batch(self.global_batch, self.replicas)
        check_enough_data(self.data.samples, self.global_batch)

    def _check_options(self, record: Any) -> None:
        """Only the strategy's own options: another's is one sentence naming its owners."""
        for name, value in self.options.items():
            if name in record.option_names():
                continue
            owners = [r.name for r in option_owners(name)]
            if not owners:
                own = ", ".join(record.option_names())
                raise GpkError(
                    f"{name}={value!r} is not an option of any strategy; drop it"
                    + (f", or use one of {own} for {self.strategy!r}" if own else "")
                )
            raise GpkError(
                f"{name}={value!r} applies to strategy={owners[0]!r}"
                + "".join(f" or {o!r}" for o in owners[1:])
                + f" only; drop it or use strategy={owners[0]!r} instead of {self.strategy!r}"
            )

    def _check_backend(self) -> None:
        """What the run's backend lacks, each one sentence naming what to use instead."""
        backend = backend_record(self.backend)
        name, display = self.backend, backend.display
        if not backend.custom_loop and self.mode != "fit":
            raise GpkError(
                f"mode={self.mode!r} is the TensorFlow custom loop; on backend={name!r} use "
                "mode='fit', Keras's own loop under keras.distribution"
            )
        if not backend.chooses_all_reduce and self.all_reduce != "auto":
            raise GpkError(
                f"all_reduce={self.all_reduce!r} picks a tf.distribute all-reduce; on "
                f"backend={name!r} XLA chooses the collectives, so drop it"
            )
        if (
            not backend.reads_tf_data
            and self.data.kind == "dataset_builder"
            and importlib.util.find_spec("tensorflow") is None
        ):
            raise GpkError(
                f"the dataset builder {self.data.name} gives a tf.data.Dataset, which a "
                f"{display} run reads with TensorFlow, not installed here; pass (x, y) arrays or "
                "a built-in set, or install TensorFlow (pip install -e '.[cpu]')"
            )
        split = SequenceSplit.of(self)
        if not backend.shards_layers and split.any:
            option = named(split)
            raise GpkError(
                f"{option} splits a sequence over a mesh's axes, which {display} does not run; "
                f"use backend='jax' or drop {option.split('=')[0]}="
            )
        if not backend.shards_layers and self.options.get("mesh") is not None:
            raise GpkError(
                f"mesh={self.options['mesh']} splits layers over a (data, model) mesh, which "
                f"{display} does not run for strategy={self.strategy!r}; drop mesh= or use "
                "backend='jax'"
            )
        if not backend.validates and (
            self.training.validation is not None or self.training.target is not None
        ):
            raise GpkError(
                "validation during training and targets run on backend='tensorflow'; drop "
                f"validation= and target= for a {display} run, or use backend='tensorflow'"
            )

    @property
    def mesh_shape(self) -> MeshShape:
        """(data, model) devices of a tensor-parallel run, over every worker's devices; every
        device on the model axis by default."""
        return MeshShape(*self.mesh) if self.mesh is not None else MeshShape(1, self.replicas)

    def _mesh_label(self) -> str:
        laid_out = strategy_record(self.strategy).layout or self.options.get("mesh") is not None
        return "x".join(map(str, self.mesh_shape)) if laid_out else ""

    @property
    def replicas(self) -> int:
        """Model copies trained in step: the devices of every worker."""
        return self.devices.count * self.workers

    @property
    def several_processes(self) -> bool:
        """Whether its workers are processes of their own: a launcher's, or a named cluster's."""
        record = strategy_record(self.strategy)
        return record.processes or self.workers > 1 or self.cluster is not None

    @property
    def global_batch(self) -> int:
        return self.training.global_batch(self.replicas)

    def result_identity(self) -> dict[str, Any]:
        """The RunResult fields every row of this run carries, whether it finished or not."""
        return dict(
            run_id=self.run_id,
            experiment_id=self.experiment_id,
            strategy=self.strategy,
            devices=self.replicas,
            workers=self.workers,
            virtual=self.devices.virtual,
            device_kind=self.devices.kind,
            global_batch=self.global_batch,
            scaling=self.training.scaling,
            mode=self.mode,
            epochs=self.training.epochs,
            schedule=self.schedule,
            # "auto": the finished row carries the M the worker chose
            micro_batches=None if is_auto(self.micro_batches) else self.micro_batches,
            backend=self.backend,
            mesh=self._mesh_label(),
            **self.training.result_identity(self.global_batch),
        )


def check_strategy(strategy: str) -> None:
    """Checked before the devices are planned, so a typo costs no device discovery."""
    strategy_record(strategy)


def check_enough_data(samples: int | None, global_batch: int) -> None:
    if samples is not None and samples < global_batch:
        raise GpkError(
            f"the data has {samples} samples, fewer than one global batch of {global_batch}; "
            f"use batch_size <= {samples} or more data"
        )
