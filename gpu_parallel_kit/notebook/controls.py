"""The panel's controls, and the plan they describe (widgets only produce a plan).

`Controls.plan` reads the widgets' values into a `PanelPlan`: a `Request` (the same object the
magic builds), the ticked strategies and the device choices. Where a Slurm client is on the
machine, a "where" list offers its partitions (from `sinfo`): picking one runs the comparison as
job steps of one allocation there (`cluster=gpk.SlurmCluster(partition=...)`). The panel hands
that plan to the API and nothing else; the small pure helpers here are tested without a browser
or a kernel.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import ipywidgets as widgets
import pandas as pd

from ..cluster.slurm.allocation import SlurmCluster
from ..cluster.slurm.commands import Partition
from ..comparison import Comparison
from ..errors import GpkError
from ..options.request import Progress, Request
from ..pipeline.microbatch import AUTO, is_auto
from ..pipeline.schedules import SCHEDULES, schedule_record
from ..pipeline.schedules import default_schedule as schedule_by_default
from ..runs.description.device_choice import virtual_device_limit
from ..strategies import (
    DEFAULT_COMPARISON,
    check_backend,
    has,
    runnable_names,
    strategy_record,
)
from ..strategies import options as strategy_options
from ..strategies.processes import CLUSTER, WORKERS
from .strategy_options import StrategyOptions

DEFAULT_STRATEGIES = DEFAULT_COMPARISON
DEFAULT_PICKED = 4  # devices picked at first: enough for a 1, 2, 4 comparison
ACTIONS = ("run", "compare")


@dataclass(frozen=True)
class PanelPlan:
    """What one click asks for; `describe()` is the sentence the panel shows while it runs."""

    action: str  # "run": the strategies on the picked devices; "compare": on 1, 2, 4, ... of them
    request: Request  # the experiment and the plan of its runs, as the magic builds it
    strategies: tuple[str, ...]
    devices: tuple[tuple[int, ...], ...]  # device choices, as indices

    def describe(self) -> str:
        counts = ", ".join(str(len(choice)) for choice in self.devices)
        verb = "Running" if self.action == "run" else "Comparing"
        where = f" on Slurm partition {self.request.cluster.partition}" if self.on_slurm else ""
        return f"{verb} {', '.join(self.strategies)} on {counts} device(s){where}"

    @property
    def on_slurm(self) -> bool:
        return isinstance(self.request.cluster, SlurmCluster)

    def device_choices(self) -> list[int | tuple[int, ...]]:
        """The choices as the API takes them: this machine's devices by index, or, on a Slurm
        allocation, how many of its devices."""
        return [len(c) if self.on_slurm else c for c in self.devices]

    def execute(self, progress: Progress, cancel: threading.Event) -> Comparison:
        """Compare: `Experiment.compare` over the device choices. Run: `Experiment.run` of each
        ticked strategy on the picked devices (the baseline on the first), on each backend that
        offers it, every run checked before the first starts. A run, unlike a comparison's row,
        takes every option given: `workers` makes a data run one of several processes."""
        if self.action == "compare":
            return self.request.compare(
                self.strategies, self.device_choices(), progress=progress, cancel=cancel
            )
        experiment = self.request.experiment(progress)
        options = self.request.plan()
        backends = options.pop("backend") or [experiment.backend]
        (picked,) = self.device_choices()
        # `cluster` stays with every run: "where" (a Slurm allocation) applies to all of them
        others = {option.name for option in strategy_options()} - {CLUSTER.name}
        runs = []
        for strategy in self.strategies:
            record = strategy_record(strategy)
            offered = [b for b in backends if record.offered_on(b)]
            if not offered:
                check_backend(backends[0], strategy)  # refused in one sentence
            alone = record.baseline or record.one_device
            devices = (1 if self.on_slurm else picked[:1]) if alone else picked
            # each run is handed the strategy options its record lists, and no other's
            own = {
                k: v for k, v in options.items() if k not in others or k in record.option_names()
            }
            for backend in offered:
                experiment.plan(strategy, devices, backend=backend, **own)  # checked first
                runs.append((strategy, devices, backend, own))
        results = []
        for strategy, devices, backend, own in runs:
            try:
                results.append(
                    experiment.run(strategy, devices, backend=backend, cancel=cancel, **own)
                )
            except KeyboardInterrupt:  # Stop: the run's row is in the log, the rest not started
                break
        return self.request.projected(Comparison(results)) if results else Comparison(results)


def slurm_request(partition: Partition, most_devices: int) -> SlurmCluster:
    """One allocation on `partition` for a comparison of up to `most_devices` devices: as many
    nodes as its GPUs need (one on CPU nodes), at most the partition's."""
    per_node = partition.gpus_per_node
    nodes = -(-most_devices // per_node) if per_node else 1
    return SlurmCluster(
        nodes=max(1, min(nodes, partition.nodes)), gpus_per_node=per_node, partition=partition.name
    )


def device_options(devices: pd.DataFrame, limit: int) -> list[tuple[str, int]]:
    """SelectMultiple options from `list_devices()`: "/gpu:0 · NVIDIA A100 · 40 GiB".

    With fewer GPUs than `limit` (GPK_MAX_VIRTUAL), the rest are offered as virtual GPUs, as
    `plan_devices` makes them: picking more devices than there are GPUs splits the GPUs, so a
    one-GPU lab can still compare 1, 2 and 4 devices. (Without GPUs, `list_devices` already
    lists `limit` virtual CPU devices.)
    """
    options = []
    for row in devices.itertuples(index=False):
        parts = [str(row.name), str(row.description)]
        memory = row.memory_bytes
        if memory is not None and memory == memory:  # neither None nor NaN
            parts.append(f"{memory / 2**30:.0f} GiB")
        options.append((" · ".join(parts), int(row.index)))
    if len(devices) and (devices["kind"] == "gpu").all():
        for index in range(len(devices), limit):
            options.append((f"/gpu:{index} · virtual: the GPUs above, split", index))
    return options


def default_schedule(request: Request) -> str:
    """The API's default, shown in the dropdown: naive, or gpipe when micro-batches are asked."""
    if request.schedule:
        return request.schedule
    return schedule_by_default(request.micro_batches or None)


class Controls:
    """Devices, strategies, pipeline options and training sizes, laid out in one box."""

    def __init__(
        self, request: Request, devices: pd.DataFrame, partitions: Sequence[Partition] = ()
    ) -> None:
        self.request = request
        self.partitions = {p.name: p for p in partitions}
        # This machine, or a Slurm partition: its nodes and GPUs as sinfo lists them.
        self.where = widgets.Dropdown(
            options=[("this machine", "")] + [(str(p), p.name) for p in partitions],
            value="",
            description="where",
            layout=widgets.Layout(width="26em", display=None if partitions else "none"),
        )
        options = device_options(devices, virtual_device_limit())
        self.devices = widgets.SelectMultiple(
            options=options,
            value=[index for _, index in options[:DEFAULT_PICKED]],
            rows=min(max(len(options), 2), 8),
            description="devices",
            layout=widgets.Layout(width="26em"),
        )
        self.strategies = {
            name: widgets.Checkbox(value=name in DEFAULT_STRATEGIES, description=name, indent=False)
            for name in runnable_names()
        }
        for name, box in self.strategies.items():
            # Wide enough for the whole name ("multiworker" was cut to "multiw…" at 6em).
            box.layout.width = f"{len(name) * 0.65 + 2.5:.1f}em"
        self.schedule = widgets.Dropdown(
            options=SCHEDULES,
            value=default_schedule(request),
            description="schedule",
            layout=widgets.Layout(width="16em"),
        )
        self.micro_batches = widgets.BoundedIntText(
            value=1 if is_auto(request.micro_batches) else request.micro_batches or 1,
            min=1,
            max=4096,
            description="micro-batches",
            style={"description_width": "initial"},
            layout=widgets.Layout(width="12em"),
            disabled=is_auto(request.micro_batches),
        )
        # Ticked: the run measures the micro-batch curve and picks M (micro_batches="auto").
        self.auto_micro_batches = widgets.Checkbox(
            value=is_auto(request.micro_batches),
            description="auto",
            indent=False,
            layout=widgets.Layout(width="5em"),
        )
        self.auto_micro_batches.observe(self._auto_ticked, names="value")
        self.backend = widgets.Dropdown(
            options=BACKEND_CHOICES,
            value=_backend_choice(request.backend),
            description="backend",
            layout=widgets.Layout(width="16em"),
        )
        self.backend.tooltip = "jax: Keras's own keras.distribution, with tensor parallelism"
        self.batch_size = widgets.BoundedIntText(
            value=request.batch_size, min=1, max=2**24, description="batch size"
        )
        self.epochs = widgets.BoundedIntText(
            value=request.epochs, min=1, max=10_000, description="epochs"
        )
        self.steps_per_epoch = widgets.BoundedIntText(
            value=request.steps_per_epoch or 0, min=0, max=10**7, description="steps/epoch"
        )
        self.steps_per_epoch.tooltip = "0: every full global batch of the data"
        self.model_options = widgets.HBox(
            [self.schedule, self.micro_batches, self.auto_micro_batches]
        )
        # Mesh, workers, experts, recomputation, context, ...: each shown while a ticked
        # strategy's record lists it.
        self.strategy_options = StrategyOptions(request)
        self.hint = widgets.HTML()
        heading = widgets.Label("strategies", layout=widgets.Layout(min_width="max-content"))
        # The strategies wrap onto a second line rather than squeeze the left column: at 1,280
        # px seven of them in one row cut the "where" and "devices" boxes (and the dropdown's
        # arrow) off at their right.
        strategies = widgets.HBox(
            [heading, *self.strategies.values()], layout=widgets.Layout(flex_flow="row wrap")
        )
        sizes = widgets.VBox([self.backend, self.batch_size, self.epochs, self.steps_per_epoch])
        self.widget = widgets.HBox(
            [
                widgets.VBox(
                    [self.where, self.devices],
                    layout=widgets.Layout(flex="0 0 auto", min_width="27em"),
                ),
                widgets.VBox(
                    [strategies, self.model_options, self.strategy_options.widget, sizes],
                    layout=widgets.Layout(flex="1 1 auto", min_width="0"),
                ),
            ]
        )
        workers = self.strategy_options.controls[WORKERS.name].widget
        watched = (self.where, self.devices, self.backend, *self.strategies.values(), workers)
        for control in watched:
            control.observe(self._refresh, names="value")
        self._refresh()

    def plan(self, action: str) -> PanelPlan:
        """The plan of a click on Run or Compare; an empty choice is one sentence."""
        if action not in ACTIONS:
            raise ValueError(f"action={action!r} must be 'run' or 'compare'")
        strategies = tuple(name for name, box in self.strategies.items() if box.value)
        if not strategies:
            raise GpkError(f"no strategy is ticked; tick one of {', '.join(runnable_names())}")
        picked = list(self.devices.value)
        if not picked:
            raise GpkError("no device is picked; pick one or more in the devices list")
        choices = [picked] if action == "run" else device_sets(picked)
        counts = [len(choice) for choice in choices]
        request = dataclasses.replace(
            self.training_request(), **self.strategy_options.values(counts)
        )
        if self.where.value:
            most = max(len(choice) for choice in choices)
            cluster = slurm_request(self.partitions[self.where.value], most)
            request = dataclasses.replace(request, cluster=cluster)
        return PanelPlan(action, request, strategies, tuple(tuple(c) for c in choices))

    def training_request(self) -> Request:
        """The request with the training controls' values: batch, epochs, steps, backend and
        the pipeline's schedule; the strategy options are `plan`'s."""
        return dataclasses.replace(
            self.request,
            batch_size=self.batch_size.value,
            epochs=self.epochs.value,
            steps_per_epoch=self.steps_per_epoch.value or None,
            schedule=self.schedule.value,
            micro_batches=AUTO if self.auto_micro_batches.value else self.micro_batches.value,
            backend=list(self.backend.value),
        )

    def _workers(self) -> int | None:
        """The workers box's count; None while it is empty or not yet a number."""
        try:
            return self.strategy_options.controls[WORKERS.name].value()
        except GpkError:
            return None

    def _auto_ticked(self, change: dict) -> None:
        self.micro_batches.disabled = change["new"]
        if change["new"] and not schedule_record(self.schedule.value).micro_batches:
            # a schedule of one micro-batch leaves auto nothing to choose
            self.schedule.value = schedule_by_default(AUTO)

    def _refresh(self, _change: object = None) -> None:
        """Show the pipeline's options when a pipeline is ticked, and say what each button will
        run."""
        staged = any(box.value and has(name, "stages") for name, box in self.strategies.items())
        self.model_options.layout.display = None if staged else "none"
        picked = list(self.devices.value)
        ticked = [name for name, box in self.strategies.items() if box.value]
        self.strategy_options.show(ticked, len(picked), list(self.backend.value))
        if not picked:
            self.hint.value = "<i>Pick at least one device.</i>"
            return
        counts = ", ".join(str(len(choice)) for choice in device_sets(picked))
        workers = (
            f" <code>multiworker</code> starts {self._workers() or 2} local worker "
            "processes, each with the device count (one each on the CPU)."
            if self.strategies["multiworker"].value
            else ""
        )
        where = ""
        if self.where.value:
            partition = self.partitions[self.where.value]
            kind = "GPUs" if partition.gpus_per_node else "devices"
            where = (
                f" On Slurm partition <code>{partition.name}</code>: one allocation, each run a "
                f"job step on as many of its {kind} (this list gives the counts)."
            )
        self.hint.value = (
            f"<i>Run: the ticked strategies on the {len(picked)} picked device(s). "
            f"Compare: on {counts} of them. <code>single</code> always uses one.{workers}"
            f"{where}</i>"
        )


# The backends a click runs on: one, or both for one table that holds both.
BACKEND_CHOICES = (
    ("TensorFlow", ("tensorflow",)),
    ("JAX", ("jax",)),
    ("both", ("tensorflow", "jax")),
)


def _backend_choice(backend: object) -> tuple[str, ...]:
    """The dropdown's value for a request's backend (None: TensorFlow, the API's default)."""
    if not backend:
        return ("tensorflow",)
    chosen = (backend,) if isinstance(backend, str) else tuple(backend)
    known = [value for _, value in BACKEND_CHOICES]
    return chosen if chosen in known else ("tensorflow",)


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
