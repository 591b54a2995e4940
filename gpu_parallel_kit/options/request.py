"""What a front end asks for, as plain values: the model, the data and the training options.

`gpk` and the `%gpk` magic fill a `Request` from their parsed options (`request_from`), the panel
from its widgets; all then call the same API: `Request.experiment()` is an `Experiment`, and
`Request.plan()` the keyword arguments of its `run` and `compare`, both through the option
table's one mapping (`options.table.api_arguments`). Nothing here validates or trains: the API
does both, and every mistake comes back as its one-sentence `GpkError`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..api import Experiment
from ..comparison import Comparison, check_projection
from .projection import PROJECTION_ARGUMENTS, projection_values
from .table import MIB, STRATEGY_FLAGS, TRAINING, api_arguments, api_default, training_values

__all__ = ["MIB", "Request", "request_from"]
# Experiment(progress=...): lines per configuration, "rounds", none, or a factory
Progress = bool | str | Callable[[Any], Any]


def _with_strategy_options(cls: type) -> type:
    """The strategies' options as fields of their own (`options.table.STRATEGY_FLAGS`, read
    from the records), after the hand-written ones, each defaulting to the API's default."""
    for flag in STRATEGY_FLAGS:
        cls.__annotations__[flag.name] = "Any"
        setattr(cls, flag.name, flag.api_default)
    return cls


@dataclass(frozen=True)
@_with_strategy_options
class Request:
    """One experiment and the plan shared by its runs; defaults are the API's own.

    >>> Request(model="mlp", batch_size=512).plan()["all_reduce"]
    'auto'
    """

    model: Any  # a builder function, a built-in name or a .keras path (already resolved)
    data: Any = None  # (x, y), a built-in set name or a dataset builder; None: the model's own set
    # The training options (options.table.TRAINING), in the API's units, defaults the API's own.
    batch_size: int = api_default("batch_size")  # global (strong) or per-device (weak) batch
    epochs: int = api_default("epochs")
    steps_per_epoch: int | None = api_default("steps_per_epoch")  # None: all full batches
    seed: int = api_default("seed")
    scaling: str = api_default("scaling")
    timeout: float | None = api_default("timeout")  # seconds per run
    mode: str | None = api_default("mode")  # fit | explicit; None: per strategy
    all_reduce: str = api_default("all_reduce")
    memory_budget: int | None = api_default("memory_budget")  # bytes per device
    log: str | None = api_default("log")  # run log file; None: $GPK_LOG or ./gpk_runs.sqlite
    # Time to accuracy (see Experiment): validation data, the learning-rate rule, the target.
    validation: Any = None  # (x_val, y_val), a fraction such as 0.1, or a dataset builder
    validation_every_steps: int | None = api_default("validation_every_steps")  # None: epochs
    lr_scaling: str = api_default("lr_scaling")  # none | linear | sqrt
    warmup_epochs: float = api_default("warmup_epochs")
    target: Any = api_default("target")  # e.g. "val_accuracy=0.9" or {"val_accuracy": 0.9}
    deterministic: bool = api_default("deterministic")
    backend: Any = api_default("backend")  # tensorflow | jax, or both (compare); None: tensorflow
    # The fast path (runs/description/tuning_rules.py): tune's rules, an explicit steps per
    # execution, and whether communication is measured after training.
    tune: str = api_default("tune")  # auto | off
    steps_per_execution: int | None = api_default("steps_per_execution")  # None: tune's choice
    measure_comm: bool = api_default("measure_comm")
    # The projection after a comparison (options.projection); None: the projection's default.
    project: str | None = None  # the link's preset, e.g. nvlink4; None: no projection
    project_devices: Sequence[int] | None = None  # counts to project onto
    gpu: str | None = None  # the GPU preset; None: the link's usual GPU
    precision: str | None = None  # fp32 | tf32 | bf16 | fp16
    project_batch: int | None = None  # the global batch to project at
    compute: str | None = None  # counted | measured
    # Then each strategy's options (schedule, micro_batches, workers, mesh, ...), added from the
    # strategies' records by `_with_strategy_options`.

    def __repr__(self) -> str:
        # Short: the default repr would print the data arrays themselves.
        changed = [
            f"{field.name}=" + (_describe(value) if field.name == "validation" else repr(value))
            for field in dataclasses.fields(self)[2:]
            if (value := getattr(self, field.name)) != field.default
        ]
        return (
            " ".join([f"<Request {_describe(self.model)} on {_describe(self.data)}", *changed])
            + ">"
        )

    def experiment(self, progress: Progress = True) -> Experiment:
        """The API's Experiment, on the first backend asked; its constructor checks every
        training setting, and the projection's presets are checked here, before anything
        runs."""
        self.check_projection()
        settings, _ = api_arguments(self._training())
        return Experiment(
            model=self.model,
            data=self.data,
            validation=self.validation,
            progress=progress,
            **settings,
            **self._first_backend(),
        )

    def _first_backend(self) -> dict[str, str]:
        """The experiment's own backend: the first asked (each run is still given its own), so
        what runs on the experiment alone, a searched plan run here, runs where it was asked."""
        asked = [self.backend] if isinstance(self.backend, str) else list(self.backend or ())
        return {"backend": asked[0]} if asked else {}

    def plan(self) -> dict[str, Any]:
        """Keyword arguments of `Experiment.run`/`compare` (the others ignore model-only ones)."""
        return api_arguments(self._training())[1]

    def check_projection(self) -> None:
        """An unknown link, GPU, precision or compute source: one sentence naming the presets."""
        asked = self._projection()
        if asked is not None:
            check_projection(
                asked["preset"], asked.get("device"), asked.get("precision"), asked.get("compute")
            )

    def projected(self, comparison: Comparison) -> Comparison:
        """The comparison with the asked projection's rows added; as it is without `project`."""
        asked = self._projection()
        if asked is None or not comparison.results:
            return comparison
        return comparison.project(**asked)

    def _projection(self) -> dict[str, Any] | None:
        """`Comparison.project`'s keyword arguments, the unset ones left to its defaults."""
        if self.project is None:
            return None
        given = {key: getattr(self, name) for name, key in PROJECTION_ARGUMENTS.items()}
        return {key: value for key, value in given.items() if value is not None}

    def _training(self) -> dict[str, Any]:
        return {option.name: getattr(self, option.name) for option in TRAINING}

    def compare(
        self,
        strategies: Sequence[str],
        devices: Sequence[int | Sequence[int]],
        progress: Progress = True,
        cancel: threading.Event | None = None,
        rounds: int | None = None,
        measure_s: float | None = None,
    ) -> Comparison:
        """Every strategy on every device choice; see `Experiment.compare`."""
        experiment = self.experiment(progress)
        comparison = experiment.compare(
            list(strategies),
            list(devices),
            rounds=rounds,
            measure_s=measure_s,
            cancel=cancel,
            **self.plan(),
        )
        cancelled = any(r.status == "cancelled" for r in comparison.results)
        return comparison if cancelled else self.projected(comparison)


def request_from(parsed: Any, model: Any, data: Any, validation: Any = None) -> Request:
    """The Request a parsed command line (`gpk` or `%gpk`) describes, with the model, data and
    validation each front end resolves in its own way."""
    return Request(
        model=model,
        data=data,
        validation=validation,
        **training_values(parsed),
        **projection_values(parsed),
    )


def _describe(value: Any) -> str:
    """A model or data source in a few words: a function's name, an array's shape."""
    if value is None:
        return "its own data"
    if isinstance(value, tuple | list):
        return "(" + ", ".join(_describe(item) for item in value) + ")"
    if hasattr(value, "shape"):
        return f"array{tuple(value.shape)}"
    return getattr(value, "__name__", None) or repr(value)
