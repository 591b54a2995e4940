"""What a notebook front end asks for, as plain values.

The `%gpk` magic fills a `Request` from its options and the panel from its widgets; both then call
the public API the `gpk` command line calls: `Request.experiment()` is an `Experiment`, and
`Request.plan()` the keyword arguments of its `run` and `compare`. Nothing here validates or
trains: the API does both, and every mistake comes back as its one-sentence `GpkError`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..api import DEFAULT_TIMEOUT_S, Comparison, Experiment

MIB = 2**20
Progress = bool | Callable[[Any], Any]  # Experiment(progress=...): a bar, none, or a factory


@dataclass(frozen=True)
class Request:
    """One experiment and the plan shared by its runs; defaults are the API's own.

    >>> Request(model="mlp", batch_size=512).plan()["all_reduce"]
    'auto'
    """

    model: Any  # a builder function, a built-in name or a .keras path (already resolved)
    data: Any = None  # (x, y), a built-in set name or a dataset builder; None: the model's own set
    batch_size: int = 256  # global batch (strong scaling) or per-device batch (weak scaling)
    epochs: int = 1
    steps_per_epoch: int | None = None  # None: as many full global batches as the data holds
    seed: int = 0
    scaling: str = "strong"
    timeout: float | None = DEFAULT_TIMEOUT_S  # seconds per run
    mode: str | None = None  # fit | explicit (data parallel recipe written out); None: per strategy
    all_reduce: str = "auto"
    schedule: str | None = None  # model parallel; None: naive, or gpipe with micro-batches
    micro_batches: int | None = None  # model parallel; None: 1
    balance: Any = "params"  # model parallel: params | time | stage start indices
    memory_budget: int | None = None  # bytes of parameters + optimizer state per device
    workers: int | None = None  # multiworker: local worker processes; None: 2 (or the cluster's)
    cluster: str | None = None  # multiworker: cluster file of named hosts; None: local workers
    log: str | None = None  # run log file; None: $GPK_LOG or ./gpk_runs.sqlite
    # Time to accuracy (see Experiment): validation data, the learning-rate rule, the target.
    validation: Any = None  # (x_val, y_val), a fraction such as 0.1, or a dataset builder
    validation_every_steps: int | None = None  # None: at each epoch end
    lr_scaling: str = "none"  # none | linear | sqrt
    warmup_epochs: float = 0.0
    target: Any = None  # e.g. "val_accuracy=0.9" or {"val_accuracy": 0.9}
    deterministic: bool = False

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
        """The API's Experiment; its constructor checks every training setting."""
        return Experiment(
            model=self.model,
            data=self.data,
            batch_size=self.batch_size,
            epochs=self.epochs,
            steps_per_epoch=self.steps_per_epoch,
            seed=self.seed,
            scaling=self.scaling,
            timeout=self.timeout,
            log=self.log,
            progress=progress,
            validation=self.validation,
            validation_every_steps=self.validation_every_steps,
            lr_scaling=self.lr_scaling,
            warmup_epochs=self.warmup_epochs,
            target=self.target,
            deterministic=self.deterministic,
        )

    def plan(self) -> dict[str, Any]:
        """Keyword arguments of `Experiment.run`/`compare` (the others ignore model-only ones)."""
        return {
            "mode": self.mode,
            "all_reduce": self.all_reduce,
            "schedule": self.schedule,
            "micro_batches": self.micro_batches,
            "balance": self.balance,
            "memory_budget": self.memory_budget,
            "workers": self.workers,
            "cluster": self.cluster,
        }

    def compare(
        self,
        strategies: Sequence[str],
        devices: Sequence[int | Sequence[int]],
        progress: Progress = True,
        cancel: threading.Event | None = None,
    ) -> Comparison:
        """Every strategy on every device choice; see `Experiment.compare`."""
        experiment = self.experiment(progress)
        return experiment.compare(list(strategies), list(devices), cancel=cancel, **self.plan())


def device_sets(picked: Sequence[int]) -> list[list[int]]:
    """The device choices a comparison over the `picked` devices runs on: the first 1, 2, 4, ...
    of them, and all of them. Indices, not counts, so picking GPUs 1 and 3 compares on exactly
    those.

    >>> device_sets([0, 1, 2, 3, 4, 5])
    [[0], [0, 1], [0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]
    """
    chosen = list(dict.fromkeys(picked))
    sizes = []
    size = 1
    while size < len(chosen):
        sizes.append(size)
        size *= 2
    if chosen:
        sizes.append(len(chosen))
    return [chosen[:n] for n in sizes]


def one_sentence(error: BaseException) -> str:
    """An error's message on one line, as the panel and the magic show it."""
    text = " ".join(str(error).split())
    return text or type(error).__name__


def _describe(value: Any) -> str:
    """A model or data source in a few words: a function's name, an array's shape."""
    if value is None:
        return "its own data"
    if isinstance(value, tuple | list):
        return "(" + ", ".join(_describe(item) for item in value) + ")"
    if hasattr(value, "shape"):
        return f"array{tuple(value.shape)}"
    return getattr(value, "__name__", None) or repr(value)
