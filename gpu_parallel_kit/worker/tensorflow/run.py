"""A TensorFlow run: the skeleton's steps done with tf.distribute, by the strategy's engine.

This module is imported by the fork server before any run (so TensorFlow is imported once, not per
run) and must therefore not start the TensorFlow runtime at import time.
"""

from __future__ import annotations

from . import tensorflow_first  # noqa: F401 - TensorFlow before Keras, quietly

# isort: split

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from ...runs.description.communication_reuse import MeasuredComm
from ...runs.description.run_spec import RunSpec
from ...runs.results.run_result import RunResult
from ...strategies import REGISTERED, resolve, strategy_record
from ..child import run_child
from ..compiling import compile_model, load_model
from ..input_names import check_input_names
from ..measuring.peak_memory import PeakMemory
from ..measuring.recorder import StepRecorder
from ..skeleton import BuiltModel
from ..skeleton import run_in_this_process as run_skeleton
from ..strategy_hooks import ModelAndBatches
from ..tuning import tune_run
from .datasets import build_from_data, labels, make_dataset, replica_shares, with_prefetch
from .device_setup import configure_worker_devices
from .engines.base import Engine
from .engines.evaluation import watch_convergence
from .peak_memory import peak_memory
from .preflight import check_inputs, check_targets, largest_label


def _import_engines() -> None:
    """The engines the strategies' records name, imported here, with the fork server's preload,
    rather than once in every run's child."""
    for record in REGISTERED:
        if record.offered_on("tensorflow"):
            resolve(record.worker_classes["tensorflow"])


_import_engines()


def worker_main(spec: RunSpec, connection: Any) -> None:
    """Entry point of the worker process; always ends the process, never returns."""
    run_child(spec, connection, run_in_this_process)


def run_in_this_process(
    spec: RunSpec,
    emit: Callable[..., None],
    report_and_exit: Callable[[RunResult], None] | None = None,
    next_round: Callable[[], bool] | None = None,
) -> RunResult:
    """Run one TensorFlow spec here and return its result (a failure is a result too)."""
    return run_skeleton(spec, emit, report_and_exit, TensorFlowRun(spec), next_round)


def make_engine(spec: RunSpec, device_names: tuple[str, ...]) -> Engine:
    """The engine the strategy's record names for TensorFlow."""
    return resolve(strategy_record(spec.strategy).worker_classes["tensorflow"])(spec, device_names)


class TensorFlowRun:
    """The skeleton's steps on TensorFlow: a tf.data pipeline, the engine's strategy and loop."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    def versions(self) -> dict[str, str]:
        return {"tensorflow": tf.__version__, "keras": keras.__version__}

    def set_up_devices(self) -> tuple[str, ...]:
        self.device_names = configure_worker_devices(self.spec.devices)
        if self.spec.training.deterministic:
            tf.config.experimental.enable_op_determinism()  # same seed, same curve
        self.engine = make_engine(self.spec, self.device_names)
        return self.device_names

    def prepare_data(self) -> int:
        spec = self.spec
        # Seeded before a dataset builder runs: its own unseeded shuffle then repeats too.
        keras.utils.set_random_seed(spec.training.seed)
        self.dataset, steps = make_dataset(spec.data, spec.training, spec.global_batch)
        self.shares = replica_shares(spec.data, spec.training, spec.global_batch)
        return steps

    def build(self, steps_per_epoch: int, total: int, warmup: int) -> BuiltModel:
        spec, engine = self.spec, self.engine
        with engine.scope():
            keras.utils.set_random_seed(spec.training.seed)
            model = load_model(spec.model)
        check_input_names(model, self.dataset.element_spec[0])
        tuned = tune_run(spec, model, steps_per_epoch, total, warmup)
        self.dataset = with_prefetch(self.dataset, tuned.prefetch_batches)
        if self.shares is not None:
            shares = self.shares
            engine.replica_shares = lambda index, count: with_prefetch(
                shares(index, count), tuned.prefetch_batches
            )
        element_spec = self.dataset.element_spec
        # Compiled once the data says how many steps an epoch has.
        with engine.scope():
            compile_model(
                model,
                spec.model,
                spec.training,
                tuned.steps_per_execution,
                "auto" if tuned.jit_compile is None else tuned.jit_compile,
            )
            check_inputs(model, element_spec)
            build_from_data(model, element_spec)
            check_targets(model, element_spec, largest_label(labels(spec.data)))
        self.steps_per_epoch = steps_per_epoch
        return BuiltModel(model, tuned)

    def scope(self) -> contextlib.AbstractContextManager:
        return self.engine.scope()

    def watch(self, recorder: StepRecorder, model: keras.Model) -> None:
        watch_convergence(recorder, self.engine, model, self.spec)

    def train(self, model: keras.Model, recorder: StepRecorder) -> None:
        run = self.hooks_input(model)
        self.engine.before_training(run)
        self.engine.train(run, self.steps_per_epoch, recorder)

    def prepare_measurement(self, model: keras.Model) -> None:
        self.engine.prepare_measurement(self.hooks_input(model))

    def time_tasks_alone(self, model: keras.Model) -> None:
        self.engine.time_tasks_alone(self.hooks_input(model))

    def measure(self, model: keras.Model) -> None:
        self.engine.measure(self.hooks_input(model))

    def peak_memory(self) -> PeakMemory:
        return peak_memory(self.spec.devices.kind, self.device_names)

    def describe(self) -> str:
        return self.engine.describe()

    def result_fields(self, model: keras.Model, step_time_s: float | None) -> dict[str, Any]:
        run = self.hooks_input(model)
        self.engine.after_training(run)
        return self.engine.result_fields(run, step_time_s)

    def lend_communication(self, measured: MeasuredComm) -> None:
        self.spec = self.engine.spec = dataclasses.replace(self.spec, comm_from=measured)

    def hooks_input(self, model: keras.Model) -> ModelAndBatches:
        """What the engine's hooks work on: the model and the run's tf.data pipeline."""
        return ModelAndBatches(model, self.dataset)
