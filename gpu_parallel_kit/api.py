"""`Experiment`: the plain Python API every front end calls to plan, run and compare runs."""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from .backends import backend_record
from .cluster.slurm.allocation import (
    SlurmCluster,  # noqa: F401 - public as gpk.SlurmCluster
    held_allocation,
    is_slurm,
    slurm_record,
)
from .comparison import Comparison, remember_counter
from .errors import GpkError
from .planning import PlanRuns, search_experiment
from .planning.calibration_probe import DEFAULT_BUDGET_S, DeviceCalibration
from .planning.counted_activations import with_counted_activations
from .planning.predicted_rows import AskedCalibration, asked_calibration, with_predictions
from .planning.search import experiment_card
from .runner import run_grid, run_isolated, with_gate
from .runs.description.accuracy_target import parse_target
from .runs.description.device_choice import plan_devices
from .runs.description.pickled_functions import keras_config
from .runs.description.run_spec import RunSpec, TrainingConfig, check_strategy
from .runs.description.sources import ArrayStore, default_data_for, model_source
from .runs.description.strategy_options import (
    given_options,
    one_backend,
    strategy_fields,
    strategy_keywords,
)
from .runs.description.tuning_rules import check_tune
from .runs.description.validation_data import training_and_validation
from .runs.processes.child_process import RunInterrupted
from .runs.processes.configuration_lines import ComparisonProgress, configuration_lines
from .runs.processes.failure_reasons import refused_for_every_run
from .runs.processes.progress_bars import run_label, run_progress
from .runs.results.run_result import RunResult
from .runs.scheduling.comparison_grid import plan_comparison
from .runs.scheduling.comparison_rounds import merge_rounds, new_run_id, rounds_to_run, tag_round
from .runs.scheduling.measuring_until_known import measuring_rule
from .runs.scheduling.servers_ahead import warm
from .runs.scheduling.started_ahead import StartedAhead
from .runs.scheduling.step_counting import (
    CountAhead,
    CountBatches,
    count_batches,
    count_in_child,
    count_spec,
    work_key,
)
from .store import RunLog, WorkCounts
from .strategies import DEFAULT_COMPARISON, check_backend
from .strategies.long_sequences import SequenceSplit
from .strategies.processes import check_workers

ROUNDS = "rounds"  # progress="rounds": a line per round of a comparison, not per configuration

DEFAULT_TIMEOUT_S = 600.0


class Experiment:
    """A model, its data and how to train it; runs it under different strategies and devices.

    >>> exp = Experiment(model="mlp", data="tabular", batch_size=256, epochs=1)
    >>> exp.run(strategy="data", devices=2)
    >>> exp.compare(strategies=["single", "data"], devices=[1, 2, 4]).table

    Args:
        model: a zero-argument function returning a Keras model (called in each worker, inside
            the strategy's scope), a built-in name (`"mlp"`, `"cnn"`, `"transformer"`) or the
            path of a saved `.keras` file.
        data: `(x, y)` arrays (either side a dict, list or tuple of arrays for several inputs
            or outputs), a built-in set (`"tabular"`, `"images"`, `"tokens"`) or a
            zero-argument function returning an unbatched `tf.data.Dataset` of `(x, y)`.
            Default: the built-in model's own set.
        batch_size: the global batch (strong scaling) or each device's (weak scaling).
        epochs: passes over the data.
        steps_per_epoch: default: as many full global batches as the data holds.
        seed: weights, batch order and held-out samples all follow it.
        scaling: `"strong"` keeps the global batch; `"weak"` keeps each device's batch.
        optimizer: for an uncompiled model: a name, a Keras optimizer or its config.
        loss: for an uncompiled model: a name, a Keras loss or its config.
        metrics: for an uncompiled model.
        samples: the size of a built-in synthetic set.
        shuffle: reshuffle the batch order each epoch (from the seed).
        warmup_steps: steps left out of the step-time statistics (default 2).
        validation: `(x_val, y_val)`, a fraction held out before training, or a function
            returning a finite `tf.data.Dataset`; evaluated at each epoch end.
        validation_every_steps: evaluate every N optimizer steps instead.
        lr_scaling: `"none"`, `"linear"` or `"sqrt"` in the global batch's growth.
        warmup_epochs: epochs over which the rate ramps to the scaled one.
        target: a metric to reach, such as `{"val_accuracy": 0.9}` or `"val_loss<=0.3"`.
        deterministic: TensorFlow's op determinism in every worker.
        backend: `"tensorflow"` or `"jax"`.
        tune: `"auto"` lets each run's worker pick steps per execution, XLA and prefetch
            (recorded in the row); `"off"` keeps Keras's defaults.
        measure_comm: `False` skips the communication measurement after training.
        timeout: seconds per run; `None` for no limit.
        log: the run log's SQLite file (default `./gpk_runs.sqlite`, or `GPK_LOG`).
        progress: `True`: a comparison shows one line per configuration, updated as its rounds
            finish, and a run one bar; `"rounds"`: a line per round instead; `False`: none; or a
            factory called with each run's plan (a comparison's: each configuration's, its
            rounds then fed to what it returns).

    `scaling`, `lr_scaling`, `warmup_epochs`, `target`, `deterministic`, `tune` and
    `measure_comm` are every run's defaults; `run()`, `compare()` and `plan()` can override them
    per call.
    """

    def __init__(
        self,
        model: Any,
        data: Any = None,
        batch_size: int = 256,
        epochs: int = 1,
        steps_per_epoch: int | None = None,
        seed: int = 0,
        *,
        scaling: str = "strong",
        optimizer: Any = None,
        loss: Any = None,
        metrics: Sequence[Any] = (),
        samples: int | None = None,
        shuffle: bool = True,
        warmup_steps: int | None = None,
        validation: Any = None,
        validation_every_steps: int | None = None,
        lr_scaling: str = "none",
        warmup_epochs: float = 0.0,
        target: Any = None,
        deterministic: bool = False,
        backend: str = "tensorflow",
        tune: str = "auto",
        measure_comm: bool = True,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        log: str | None = None,
        progress: bool | str | Callable[[RunSpec], Any] = True,
    ) -> None:
        self.training = TrainingConfig(
            batch_size=batch_size,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            seed=seed,
            scaling=scaling,
            optimizer=keras_config(optimizer),
            loss=keras_config(loss),
            metrics=tuple(keras_config(m) for m in metrics),
            shuffle=shuffle,
            warmup_steps=warmup_steps,
            lr_scaling=lr_scaling,
            warmup_epochs=warmup_epochs,
            validation_every_steps=validation_every_steps,
            deterministic=deterministic,
        )
        self.model = model_source(model)
        if data is None:
            data = default_data_for(self.model)
            if data is None:
                raise GpkError(
                    "data= is missing; pass (x, y) arrays, a built-in set name or a function "
                    "returning a tf.data.Dataset"
                )
        self._arrays = ArrayStore()
        self.data, held_out = training_and_validation(
            data, validation, seed=seed, store=self._arrays, samples=samples
        )
        # The target is checked with the validation data known (a val_* target needs some).
        self.training = dataclasses.replace(
            self.training, validation=held_out, target=parse_target(target)
        )
        check_backend(backend, "single")
        self.backend = backend
        warm(backend)  # its server starts and lists the devices while the user's cells go on
        check_tune(tune, None, None, measure_comm)
        self.tune = tune  # every run's, unless run(tune=...) says otherwise
        self.measure_comm = measure_comm
        self.timeout = timeout
        self.log = RunLog(log)
        if isinstance(progress, str) and progress != ROUNDS:
            raise GpkError(
                f"progress={progress!r} is not a choice; use True (a line per configuration), "
                f'"{ROUNDS}" (a line per round) or False'
            )
        self.progress = progress
        self.experiment_id = uuid.uuid4().hex[:12]
        self._counting: CountAhead | None = None
        remember_counter([self.experiment_id], self.counted_step)  # for its rows' comparisons
        self._plan_runs = PlanRuns(
            self.model,
            self.backend,
            self.training.batch_size,
            run_spec=self.plan,
            execute=self._execute,
            counter=self.counted_step,
        )

    def __repr__(self) -> str:
        return (
            f"<Experiment {self.experiment_id} model={self.model.name} data={self.data!r} "
            f"batch_size={self.training.batch_size} ({self.training.scaling} scaling) "
            f"epochs={self.training.epochs}"
            + ("" if backend_record(self.backend).default else f" backend={self.backend}")
            + ">"
        )

    @strategy_keywords
    def plan(
        self,
        strategy: str = "single",
        devices: int | Sequence[int] = 1,
        *,
        mode: str | None = None,
        all_reduce: str = "auto",
        steps_per_execution: int | None = None,
        jit_compile: bool | None = None,
        tune: str | None = None,
        measure_comm: bool | None = None,
        timeout: float | None = ...,
        save_weights: str | None = None,
        memory_budget: int | None = None,
        scaling: str | None = None,
        lr_scaling: str | None = None,
        warmup_epochs: float | None = None,
        target: Any = None,
        deterministic: bool | None = None,
        backend: str | None = None,
        **strategy_options: Any,
    ) -> RunSpec:
        """Validate one run without starting it; every mistake is one sentence raised here.

        `run()` and `compare()` take the same options; one left at None keeps the experiment's.

        Args:
            mode: `"fit"` by default; `"explicit"` for `"multiworker"` (the only loop that works
                under MultiWorkerMirroredStrategy).
            tune: `"auto"` lets the worker pick steps per execution, XLA and the input
                pipeline's prefetch, recorded in `RunResult.extra["tuned"]`; `"off"` keeps
                Keras's defaults. An explicit `steps_per_execution=` or `jit_compile=` wins.
            measure_comm: `False` skips the communication measurement after training (data
                parallel): the row then says "not measured", never zero.
            scaling, lr_scaling, warmup_epochs, target, deterministic: this run's own.
            backend: `"tensorflow"` or `"jax"`.
            **strategy_options: the keywords a strategy's record lists (`Strategy.options`):
                `schedule`, `micro_batches` (`"auto"` too), `balance`, `recompute` and
                `virtual_stages` for `"pipeline"` (alias `"model"`); `workers` and `cluster` for
                `"multiworker"`; `mesh=(data, model)` and `layout_map` for `"tensor"` and
                `"fsdp"`; `min_shard_bytes` for `"fsdp"`. The other strategies ignore them, so
                a comparison can pass them to every run.

        Raises:
            GpkError: the mistake, in one sentence.
        """
        given = given_options(strategy_options, Experiment.plan, Experiment.compare)
        backend = one_backend(backend) or self.backend
        check_strategy(strategy)
        record = check_backend(backend, strategy)
        if record.processes or given.get("cluster") is not None:
            given["cluster"] = _loaded_cluster(given.get("cluster"))
        check_workers(record, backend, given.get("workers"), given.get("cluster"))
        return RunSpec(
            run_id=new_run_id(),
            experiment_id=self.experiment_id,
            strategy=strategy,
            devices=plan_devices(devices, backend=backend),
            model=self.model,
            data=self.data,
            training=self._run_training(
                scaling=scaling,
                lr_scaling=lr_scaling,
                warmup_epochs=warmup_epochs,
                target=target,
                deterministic=deterministic,
            ),
            # Keras's own fit wherever the strategy trains with it on this backend
            mode=mode or ("fit" if backend in record.fit_on else record.default_mode),
            all_reduce=all_reduce,
            steps_per_execution=steps_per_execution,
            jit_compile=jit_compile,
            tune=self.tune if tune is None else tune,
            measure_comm=self.measure_comm if measure_comm is None else measure_comm,
            timeout_s=self.timeout if timeout is ... else timeout,
            save_weights=save_weights,
            memory_budget=memory_budget,
            **strategy_fields(record, backend, given),
        )

    def _run_training(self, **overrides: Any) -> TrainingConfig:
        """The experiment's training settings with one run's own values (None: the experiment's)."""
        changes = {key: value for key, value in overrides.items() if value is not None}
        if "target" in changes:
            changes["target"] = parse_target(changes["target"])
        return dataclasses.replace(self.training, **changes) if changes else self.training

    def run(
        self,
        strategy: str = "single",
        devices: int | Sequence[int] = 1,
        *,
        cancel: threading.Event | None = None,
        **plan: Any,
    ) -> RunResult:
        """Train once in a fresh worker process; the result is logged even when the run failed.

        With `cluster=` a `gpk.SlurmCluster` (or the allocation its `with` block gives), the run
        is a job step of that Slurm allocation."""
        slurm = _slurm_of(plan)
        calibration = plan.pop("calibration", None)
        spec = self.plan(strategy, devices, **plan)
        asked = asked_calibration(calibration, [spec])
        with held_allocation(slurm) as allocation:
            if allocation is not None:
                spec = dataclasses.replace(spec, slurm=allocation)
            try:
                result = self._counted([self._execute(spec, cancel)], [spec])[0]
                if asked is None:
                    return result
                return self._predicted([result], asked)[0]
            except RunInterrupted as interrupted:
                raise KeyboardInterrupt(
                    "run cancelled; its row is in gpk.history()"
                ) from interrupted

    def compare(
        self,
        strategies: Sequence[str] = DEFAULT_COMPARISON,
        devices: Sequence[int | Sequence[int]] = (1, 2, 4),
        *,
        rounds: int | None = None,
        measure_s: float | None = None,
        cancel: threading.Event | None = None,
        **plan: Any,
    ) -> Comparison:
        """Run every strategy on every device count; `single` runs once, on one device.

        The grid runs `rounds` times (None: 3, 2 with GPK_QUICK=1, or GPK_ROUNDS), interleaved;
        unfixed, a configuration whose step is not yet known runs more rounds while they fit in
        `measure_s` s (`runs/scheduling/measuring_until_known.py`). Each row is the median of its
        rounds with a 95 % interval. Ctrl-C or `cancel` stops within seconds, keeping every row.
        With `cluster=` a `gpk.SlurmCluster` (or the allocation its `with` block gives), every
        run is a job step of one Slurm allocation, sized to its row.
        """
        slurm = _slurm_of(plan)
        calibration = plan.pop("calibration", None)
        planned = plan_comparison(self.plan, self.backend, strategies, devices, plan)
        asked = asked_calibration(calibration, planned)
        with held_allocation(slurm) as allocation:
            if allocation is not None:
                planned = [dataclasses.replace(spec, slurm=allocation) for spec in planned]
            compared = self._compare_planned(planned, rounds, measure_s, cancel)
        if any(SequenceSplit.of(spec).given for spec in planned):
            compared = Comparison(
                self._counted(compared.results, planned), counter=self.counted_step
            )
        if asked is None:
            return compared
        return Comparison(self._predicted(compared.results, asked), counter=self.counted_step)

    def predict(self, comparison: Comparison, calibration: Any = None) -> Comparison:
        """`comparison`'s measured rows with the step `calibration` predicts for each (default:
        the newest kept calibration of their devices): the columns `predicted_step_time_s`,
        `predicted_over_measured` and `predicted_off_in`, and `plot_predictions()`."""
        widest = max((r.devices for r in comparison.results if r.ok), default=1)
        planned = [self.plan("single", 1)] + ([self.plan("data", widest)] if widest > 1 else [])
        asked = asked_calibration(calibration, planned if planned else [])
        if asked is None:
            raise GpkError(
                "no calibration of these devices is kept; give calibration=gpk.calibrate(...)"
            )
        return Comparison(self._predicted(comparison.results, asked), counter=self.counted_step)

    def _counted(self, results: list[RunResult], specs: list[RunSpec]) -> list[RunResult]:
        """`results` with the card's activations beside those a long-sequence run measured
        (`planning/counted_activations.py`)."""
        if not any(SequenceSplit.of(spec).given for spec in specs):
            return results
        return with_counted_activations(results, specs, lambda: experiment_card(self))

    def _predicted(self, results: list[RunResult], asked: AskedCalibration) -> list[RunResult]:
        """`results` with the step the calibration predicts for each (`planning/predicted_rows`)."""
        counted = Comparison(results, counter=self.counted_step).counted_work
        spec = self.plan("single", 1)
        key = work_key(spec, CountBatches(0, 0))
        return with_predictions(results, asked, spec, key, counted)

    def _compare_planned(
        self,
        planned: list[RunSpec],
        rounds: int | None,
        measure_s: float | None,
        cancel: threading.Event | None,
    ) -> Comparison:
        # A Slurm step trains on the allocation's nodes: this machine's gate has nothing to hold.
        specs = [spec if spec.slurm is not None else with_gate(spec) for spec in planned]
        to_target = any(s.training.target for s in specs)
        count = rounds_to_run(rounds, to_target=to_target)
        rule = measuring_rule(fixed=rounds is not None or to_target, measure_s=measure_s)

        shown = self._comparison_progress(specs)
        execute = functools.partial(self._execute, cancel=cancel, shown=shown)
        try:
            done = run_grid(specs, count, execute, cancel, rule, shown.measured if shown else None)
        finally:
            if shown is not None:
                shown.close()
        never = [spec for spec, rows in zip(specs, done, strict=True) if not rows]
        refused = [row for rows in done for row in rows if refused_for_every_run(row)]
        not_started = iter(self._not_started(never, refused[0] if refused else None))
        results = [merge_rounds(rows) if rows else next(not_started) for rows in done]
        return Comparison(results, counter=self.counted_step)

    def run_plan(
        self,
        plan: Any,
        devices: int | None = None,
        *,
        blocks: int | None = None,
        cancel: threading.Event | None = None,
        **options: Any,
    ) -> Comparison:
        """Run one searched plan's shape here, scaled down: the same tensor and stages where the
        devices allow, fewer replicas, a keras-hub backbone rebuilt with fewer blocks.

        Args:
            plan: `plans.best`, a row of `plans.table` or a mapping of a plan's fields.
            devices: the devices here the plan may take; default every device this machine
                offers (its GPUs, else `GPK_MAX_VIRTUAL` virtual devices).
            blocks: the blocks to rebuild the model with; default the fewest its stages take.
            cancel: an event that stops the run.
            **options: `run()`'s other keywords (`measure_comm`, `tune`, ...).

        Returns:
            A `Comparison` of one row; its table's `data`, `tensor` and `stages` are the shape
            that ran, and `scaled` says what changed, e.g. "data 64 -> 2; blocks 40 -> 2".
        """
        return self._plan_runs.run_plan(plan, devices, blocks=blocks, cancel=cancel, **options)

    def compare_plans(
        self,
        plans: Any,
        devices: int | None = None,
        *,
        blocks: int | None = None,
        cancel: threading.Event | None = None,
        **options: Any,
    ) -> Comparison:
        """Run several searched plans' shapes here, one after another, as `run_plan` runs one;
        every plan is checked, and refused in one sentence, before the first runs.

        Args:
            plans: `plans.top(3)` (a DataFrame of `Plans.table` rows), or a list of plans.
            devices: as `run_plan` takes them.
            blocks: as `run_plan` takes them.
            cancel: an event that stops the run in hand and those after it; the rows of
                those that ran are in `gpk.history()`.
            **options: `run()`'s other keywords.

        Returns:
            A `Comparison`, one row per plan, as `run_plan` gives one.
        """
        return self._plan_runs.compare_plans(
            plans, devices, blocks=blocks, cancel=cancel, **options
        )

    def search(self, gpus: Any, global_batch: int, **options: Any) -> Any:
        """`gpk.search` on this model and one sample of its data; `options` are its keywords."""
        return search_experiment(self, gpus, global_batch, **options)

    def count_ahead(self) -> None:
        """Count the step now, in the background, for the next comparison's projection
        (`runs/scheduling/step_counting.CountAhead`); its first run waits for the count."""
        if self._counting is None:
            self._counting = CountAhead(self._count_step)

    def counted_step(self, experiment_id: str) -> dict[str, Any] | str:
        """This experiment's step counted by the compiler for projections (from the run log, else
        a short child, then logged); one sentence when it cannot be counted."""
        if experiment_id != self.experiment_id:
            return f"experiment {experiment_id} is not this one's; its step was not counted"
        if self._counting is not None:
            self._counting.wait()
        return self._count_step()

    def _count_step(self) -> dict[str, Any] | str:
        training = self._run_training()
        spec = count_spec(self.experiment_id, self.model, self.data, training, self.backend)
        batches = count_batches(spec.global_batch)
        key = work_key(spec, batches)
        counts = WorkCounts(self.log)
        stored = counts.by_key(key)
        if stored is None:
            print(f"Counting the step of {self.model.name} for the projection (once)", flush=True)
            try:
                stored = json.dumps(count_in_child(spec, batches))
            except RuntimeError as error:
                return str(error)
        counts.save(key, self.experiment_id, stored)
        return json.loads(stored)

    def _execute(
        self,
        spec: RunSpec,
        cancel: threading.Event | None,
        ahead: StartedAhead | None = None,
        upcoming: RunSpec | None = None,
        round_of: tuple[int, int, str] | None = None,
        extra: dict[str, Any] | None = None,
        shown: ComparisonProgress | None = None,
    ) -> RunResult:
        """Run one spec, show its progress, log its row. `round_of`: (round from 0, rounds,
        the configuration's first run id) when a comparison runs in rounds; `extra`: what the
        row's `extra` adds before it is logged (the searched plan a run ran); `shown`: a
        comparison's progress, one handler per configuration, which this round's events go to."""

        def tagged(result: RunResult) -> RunResult:
            result = tag_round(result, round_of=round_of)
            return dataclasses.replace(result, extra={**result.extra, **extra}) if extra else result

        if shown is not None:
            progress = shown.round(spec, round_of)
        elif callable(self.progress):
            # A front end's own display (e.g. a widget panel): called with the run's spec, it
            # returns a handler of the worker's events with a close(result) method.
            progress = self.progress(spec)
        else:
            progress = run_progress(run_label(spec, round_of), enabled=bool(self.progress))
        try:
            result = tagged(run_isolated(spec, progress, cancel, ahead=ahead, then=upcoming))
        except RunInterrupted as interrupted:
            if ahead is not None:
                ahead.close()
            interrupted.result = tagged(interrupted.result)
            progress.close(interrupted.result)
            self.log.append(interrupted.result)
            raise
        progress.close(result)
        self.log.append(result)
        return result

    def _comparison_progress(self, specs: Sequence[RunSpec]) -> ComparisonProgress | None:
        """One progress handler per configuration of a comparison: a front end's (called once
        per configuration) or a line of `configuration_lines`; None for a line per round."""
        if self.progress == ROUNDS:
            return None
        if callable(self.progress):
            factory = self.progress
            return ComparisonProgress(specs, lambda _, spec: factory(spec))
        lines = configuration_lines([run_label(s) for s in specs], enabled=bool(self.progress))
        return ComparisonProgress(specs, lambda index, _: lines.line(index), lines)

    def _not_started(self, specs: Sequence[RunSpec], refused: RunResult | None) -> list[RunResult]:
        """Rows of the configurations a comparison never ran: cancelled, or refused as one was."""
        status, reason = "cancelled", "not started: the comparison was cancelled"
        if refused is not None:
            status, reason = refused.status, refused.reason
        rows = [RunResult(**s.result_identity(), status=status, reason=reason) for s in specs]
        for row in rows:
            self.log.append(row)
        return rows


def _slurm_of(plan: dict[str, Any]) -> Any:
    """The Slurm request or allocation `cluster=` names, taken out of `plan`; None otherwise.
    It applies to every run (a named cluster's file only to runs over processes)."""
    if is_slurm(plan.get("cluster")):
        return slurm_record(plan.pop("cluster"))
    return None


def _loaded_cluster(cluster: Any) -> Any:
    """A named cluster's file, read (so checked) before any run of a multi-process strategy."""
    if cluster is None:
        return None
    from .cluster.config import load_cluster

    return load_cluster(cluster)


def calibrate(
    devices: int | None = None,
    backend: str | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    *,
    model: Any = None,
    data: Any = None,
    batch_size: int = 256,
    save: bool = True,
    progress: bool = True,
) -> DeviceCalibration:
    """Measure the devices at hand for the cost model: a minute by default, with progress.

    Times matrix products over a sweep of sizes, elementwise chains, a compiled call's fixed
    cost and the collectives plans use (all-reduce, all-gather, reduce-scatter, all-to-all,
    send/receive) over message sizes, with 1, 2, 4, … and `devices` devices busy at once, each
    count in a fresh child that has exactly that many devices. With `model=`, the model's own
    step is timed too, at the batches its runs give each device; `compare(calibration=...)`
    times it when first asked otherwise.

    Args:
        devices: how many devices: default, every GPU, else 4 virtual devices of the CPU.
        backend: "jax" or "tensorflow"; default, the kit's default backend.
        budget_s: seconds the devices' probe may take (a model's step comes on top).
        model: a model builder or built-in name, as `gpk.Experiment` takes it, with `data=`
            and `batch_size=` as there.
        save: keep it in the cache folder, where `run()` and `compare()` find the newest
            calibration of their devices.
        progress: show a bar (a line where output cannot be redrawn).

    Returns:
        A `gpk.DeviceCalibration`: pass it as `calibration=` to `run`/`compare`, or as
        `device=` to `gpk.GPUCluster`; `.table()`, `.plot()`, `.save(path)`.

    Example: `calibration = gpk.calibrate(backend="jax")`, then
    `exp.compare(["single", "data"], devices=[1, 2, 4], calibration=calibration)`.
    """
    from .planning.calibration_probe import calibrate as calibrate_devices
    from .runs.description.device_choice import default_backend

    backend = backend or default_backend()
    spec = None
    if model is not None:
        experiment = Experiment(
            model=model, data=data, batch_size=batch_size, backend=backend, progress=False
        )
        spec = experiment.plan("single", 1)
    key = work_key(spec, CountBatches(0, 0)) if spec is not None else ""
    return calibrate_devices(
        devices,
        backend,
        budget_s,
        spec=spec,
        model_key=key,
        pipeline_task=functools.partial(_pipeline_task_s, backend),
        save=save,
        progress=progress,
    )


def _pipeline_task_s(backend: str, devices: int, runs: int) -> float:
    """One task of the kit's pipeline runner on `devices` devices around next to no work: a
    GPipe pipeline of `no_work_model`, a layer a stage, run as any run is, its step over its
    tasks (each stage's forward and backward per micro-batch, and its update); the median of
    `runs` runs, as one run's step moves by a fifth from process to process; 0 where none of
    them finished, so a failing pipeline costs the calibration nothing else."""
    import numpy as np

    from .planning.calibration_probe import (
        MICRO_BATCHES,
        NO_WORK_WIDTH,
        no_work_model,
        no_work_tasks,
    )

    batch = 8 * MICRO_BATCHES
    x = np.zeros((batch * 64, NO_WORK_WIDTH), np.float32)
    experiment = Experiment(
        model=lambda: no_work_model(devices),
        data=(x, x),
        backend=backend,
        batch_size=batch,
        progress=False,
    )
    steps = []
    for _ in range(runs):
        spec = experiment.plan("pipeline", devices, schedule="gpipe", micro_batches=MICRO_BATCHES)
        result = run_isolated(spec)
        if result.ok and result.step_time_s:
            steps.append(result.step_time_s)
    if not steps:  # the rest of the calibration stands: tasks are then charged the model's own
        return 0.0
    return statistics.median(steps) / no_work_tasks(devices)
